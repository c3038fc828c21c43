#!/usr/bin/env bash
# Runs once, when the postgres container starts on an empty data volume: one role and one
# database each for Airflow's metadata, MLflow's tracking store and the rlops label queue.
# Changing a *_DB_PASSWORD later needs `ALTER ROLE ... PASSWORD` (or a fresh volume).
set -euo pipefail

for var in AIRFLOW_DB_PASSWORD MLFLOW_DB_PASSWORD RLOPS_DB_PASSWORD; do
    if [[ -z "${!var:-}" ]]; then
        echo "init-databases.sh: ${var} is empty; set it in docker/.env" >&2
        exit 1
    fi
done

# psql variables (:'name') quote the passwords, so any character is safe here.
psql -v ON_ERROR_STOP=1 --username "${POSTGRES_USER:-postgres}" --dbname "${POSTGRES_DB:-postgres}" \
    --set airflow_pw="${AIRFLOW_DB_PASSWORD}" \
    --set mlflow_pw="${MLFLOW_DB_PASSWORD}" \
    --set rlops_pw="${RLOPS_DB_PASSWORD}" <<'SQL'
CREATE ROLE airflow LOGIN PASSWORD :'airflow_pw';
CREATE DATABASE airflow OWNER airflow;
CREATE ROLE mlflow LOGIN PASSWORD :'mlflow_pw';
CREATE DATABASE mlflow OWNER mlflow;
CREATE ROLE rlops LOGIN PASSWORD :'rlops_pw';
CREATE DATABASE rlops OWNER rlops;
SQL
echo "init-databases.sh: databases airflow, mlflow and rlops created"
