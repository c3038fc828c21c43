"""The child side of :mod:`rlops.sandbox.isolate`: a fresh interpreter that loads the pack under
the limits the parent set, and reports each stage it starts and its verdict as JSON lines. It
imports the pack loader (and torch); the validating process does not."""

from __future__ import annotations

import json
import os
import resource
from pathlib import Path
from typing import Any

from rlops.sandbox.errors import PackError
from rlops.sandbox.isolate import roles_summary
from rlops.sandbox.pack import load_pack
from rlops.sandbox.policies import probe_oracle


def child_main(argv: list[str]) -> int:
    """Entry point of the child: ``<pack> <report file> <memory budget>``."""
    pack_dir, report_file, budget = Path(argv[0]), argv[1], int(argv[2])
    out = open(report_file, "a", encoding="utf-8")  # noqa: SIM115 - opened before any pack code runs, kept to the end

    def emit(obj: dict[str, Any]) -> None:
        out.write(json.dumps(obj) + "\n")
        out.flush()

    stage = [str(pack_dir), "starting"]

    def on_stage(file: Path, what: str) -> None:
        stage[:] = [str(file), f"{what} ({file.name})"]
        emit({"stage": stage})

    _limit_memory(budget)
    emit({"ready": True})
    try:
        pack = load_pack(pack_dir, on_stage=on_stage, probe_rewards=True)
        on_stage(pack_dir / "oracle.py", "loading and running the oracle")
        probe_oracle(pack)
        emit({"ok": summary(pack)})
    except PackError as exc:
        emit({"error": {"file": exc.file, "line": exc.line, "path": exc.path, "message": exc.message}})
    except MemoryError:
        emit(
            {
                "error": {
                    "file": stage[0],
                    "line": None,
                    "path": "",
                    "message": f"{stage[1]} ran out of memory (budget {budget >> 20} MiB)",
                }
            }
        )
    except RecursionError:
        emit({"error": {"file": stage[0], "line": None, "path": "", "message": f"{stage[1]} recursed too deeply"}})
    except Exception as exc:  # noqa: BLE001 - reported to the parent as an internal error
        emit({"internal": f"{type(exc).__name__}: {exc}"})
    out.close()
    # Threads or handlers the pack's code left behind must not keep the child alive.
    os._exit(0)


def _limit_memory(budget: int) -> None:
    """Cap the address space at what is mapped now (interpreter, torch) plus ``budget``."""
    with open("/proc/self/status", encoding="ascii") as fh:
        vm = next(int(line.split()[1]) * 1024 for line in fh if line.startswith("VmSize:"))
    resource.setrlimit(resource.RLIMIT_AS, (vm + budget, vm + budget))


def summary(pack: Any) -> dict[str, Any]:
    """What ``rlops env validate`` reports about a valid pack."""
    return {
        "pack": pack.name,
        "valid": True,
        "fields": len(pack.scenario.spec.fields),
        "actions": pack.scenario.n_actions,
        "profiles": sorted(pack.scenario.profiles),
        "reward_functions": {k: fn.version for k, fn in sorted(pack.reward_fns.items())},
        "rules": len(pack.rules),
        **roles_summary(pack.scenario.spec),
    }


__all__ = ["child_main", "summary"]
