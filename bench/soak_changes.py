"""Does a world change of the soak leave room for a retrain to win? Checked offline, before an hour
of soak is spent on it.

For each pack of ``bench/stack_soak.py``'s ``WORLD_CHANGES``: a policy is trained with the product's
defaults in the production stand-in as it starts (the champion's world), then, for the world as it
starts and after each change (the changes in force cumulatively), three returns are measured on the
same held-out episodes of the ``live`` profile: that champion's, the pack's oracle's (the best policy
of that world, reading its hidden state), and a policy's trained with the same defaults in that world
(the best a retrain could do). A change leaves room for a retrain when ``retrain_gain`` (the retrained
policy's return minus the champion's) is clearly above the noise of the gates; one that leaves no
room is answered by keeping the champion, and a soak cannot expect a new champion after it. Beside
the returns, the two business rates the promotion gates hold a candidate to (completion and human
takeover, against the champion's in the same world): a retrain that earns more by completing less
or handing more to people is refused by those gates, so a change it answers only that way is not
answered in a soak either.

    python bench/soak_changes.py [--packs credit_approval,complaint_handling] [--episodes 4000]

The last line of output is one JSON object: per pack, per world, the three returns and the gain.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.loadavg import report as report_load  # noqa: E402
from bench.stack_soak import WORLD_CHANGES  # noqa: E402


def check_pack(pack_name: str, episodes: int, seed: int, workdir: Path) -> dict[str, Any]:
    from rlops.common.config import REPO_ROOT
    from rlops.model.pack_defaults import derive_defaults
    from rlops.model.policy import as_act_fn
    from rlops.model.ppo import train
    from rlops.sandbox.policies import evaluate_policy, load_oracle
    from rlops.timeline.events import Event
    from rlops.timeline.world import ProductionWorld

    changes = WORLD_CHANGES[pack_name]
    events = [Event(float(i + 1), c["kind"], {k: v for k, v in c.items() if k not in ("at", "kind")})
              for i, c in enumerate(changes)]  # fmt: skip
    world = ProductionWorld(REPO_ROOT / "scenarios" / pack_name, workdir / pack_name)

    def trained_in(pack: Any) -> tuple[Any, float]:
        plan = derive_defaults(pack, device="cpu", seed=seed)
        t0 = time.perf_counter()
        result = train(plan.config, pack.make_env(plan.num_envs, profile="live", seed=seed))
        return as_act_fn(result.policy), time.perf_counter() - t0

    def measured(pack: Any, act: Any) -> dict[str, float]:
        s = evaluate_policy(pack, act, episodes=episodes, seed=5_000_000, profile="live").summary()
        return {k: float(s[k]) for k in ("mean_return", "completion_rate", "human_takeover_rate")}

    base = world.pack([], events)
    champion, _ = trained_in(base)
    worlds: dict[str, Any] = {}
    for n in range(len(events) + 1):
        pack = world.pack(events[:n], events)
        label = "as it starts" if n == 0 else " + ".join(e.kind for e in events[:n])
        oracle = load_oracle(pack)
        retrained, wall = (champion, 0.0) if n == 0 else trained_in(pack)
        champ, retr = measured(pack, champion), measured(pack, retrained)
        row = {"champion": champ["mean_return"], "retrained": retr["mean_return"]}
        if oracle is not None:
            row["oracle"] = measured(pack, oracle)["mean_return"]
        for rate in ("completion_rate", "human_takeover_rate"):
            row[f"champion_{rate}"], row[f"retrained_{rate}"] = champ[rate], retr[rate]
        row = {k: round(v, 4) for k, v in row.items()}
        row["retrain_gain"] = round(row["retrained"] - row["champion"], 4)
        row["train_wall_s"] = round(wall, 1)
        worlds[label] = row
        print(f"  {pack_name:20} {label:28} " + "  ".join(f"{k} {v}" for k, v in row.items()), flush=True)
    return worlds


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--packs", default=",".join(WORLD_CHANGES))
    p.add_argument("--episodes", type=int, default=4000, help="held-out episodes per measure (default 4000)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    packs = [x for x in args.packs.split(",") if x]
    unknown = [x for x in packs if x not in WORLD_CHANGES]
    if not packs or unknown or args.episodes < 100:
        p.error(f"--packs must name packs of {sorted(WORLD_CHANGES)} (got {unknown or packs}); --episodes >= 100")
    load_start = report_load("start")
    with tempfile.TemporaryDirectory(prefix="rlops-soak-changes-") as tmp:
        out = {pack: check_pack(pack, args.episodes, args.seed, Path(tmp)) for pack in packs}
    print(
        json.dumps({"packs": out, "episodes": args.episodes, "load_start": load_start, "load_end": report_load("end")})
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
