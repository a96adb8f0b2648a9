# dtq: `make run` serves the API, console and WebSockets with a worker; `make test` runs the suite.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PORT ?= 8000
export PORT

.PHONY: run test bootstrap dev bench bench-peers bench-cluster redis chaos clean lint

# The runtime lock (what the Docker image installs too); a change to it reinstalls.
$(BIN)/.installed: requirements.txt
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "dtq needs Python >= 3.11")'
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@$(BIN)/python -m pip install -q --disable-pip-version-check --upgrade pip
	@$(BIN)/python -m pip install -q --disable-pip-version-check -r requirements.txt
	@touch $@

# The test and lint tools on top, for the targets that run them; a change to either lock reinstalls.
$(BIN)/.installed-dev: $(BIN)/.installed requirements-dev.txt
	@$(BIN)/python -m pip install -q --disable-pip-version-check -r requirements-dev.txt
	@touch $@

bootstrap: $(BIN)/.installed
	@mkdir -p var
	@$(BIN)/python manage.py migrate --noinput -v 0

# bootstrap plus pytest, ruff, mypy and the other tools of requirements-dev.txt.
dev: bootstrap $(BIN)/.installed-dev

run: bootstrap
	@$(BIN)/python scripts/run.py

# The engine, API, worker and failure tests that `make test` runs again on a local Redis Cluster
# (3 masters, 3 replicas) and behind Sentinel (a master, 2 replicas, 3 sentinels): a representative
# subset (docs/contributing.md), so the whole run stays within about 25 minutes on 2 cores. Tests
# of single-node mechanics are marked single_node and left out there.
TOPOLOGY_TESTS = tests/core/test_enqueue.py tests/core/test_scans.py tests/core/test_partitions.py \
	tests/core/test_lua_states.py tests/api/test_submit.py tests/api/test_endpoints_tasks.py \
	tests/api/test_endpoints_queues.py tests/api/test_endpoints_dlq.py tests/worker/test_worker_behaviour.py \
	tests/worker/test_partitioned_fetch.py tests/worker/test_wake_list.py tests/worker/test_drain.py tests/failure/test_worker_crash.py \
	tests/failure/test_scheduler.py tests/failure/test_cancel.py tests/periodic/test_engine.py \
	tests/api/test_endpoints_periodic.py tests/limits/test_engine_limits.py tests/limits/test_limits_workers.py \
	tests/core/test_unique.py tests/api/test_endpoints_limits.py tests/workflows/test_workflows.py \
	tests/workflows/test_advance.py tests/progress/test_progress.py tests/api/test_endpoints_workflows.py \
	tests/history/test_history.py tests/api/test_search.py tests/worker/test_function_library.py \
	tests/cli/test_functions_command.py tests/worker/test_samples.py tests/core/test_dlq_partitions.py \
	tests/core/test_audit.py

test: dev
	$(BIN)/python -m pytest -n auto --dist loadfile
	DTQ_TEST_TOPOLOGY=cluster $(BIN)/python -m pytest -n auto --dist loadfile -m "not single_node" $(TOPOLOGY_TESTS)
	DTQ_TEST_TOPOLOGY=sentinel $(BIN)/python -m pytest -n auto --dist loadfile -m "not single_node" $(TOPOLOGY_TESTS)

bench: bootstrap
	$(BIN)/python -m bench

bench-peers: bootstrap
	$(BIN)/python -m bench.peers

bench-cluster: bootstrap
	$(BIN)/python -m bench.bench_cluster

lint: dev
	$(BIN)/ruff check .
	$(BIN)/mypy

chaos: dev
	$(BIN)/python -m pytest -p no:xdist tests/failure -k chaos -v -s

# A throwaway, non-persistent Redis for development (failure-modes.md: everything is lost on restart).
REDIS_PORT ?= 6381
redis:
	@command -v redis-server >/dev/null || { echo "redis-server not found: apt-get install redis-server (Debian) or docker compose up"; exit 1; }
	@echo "non-persistent redis on 127.0.0.1:$(REDIS_PORT); use DTQ_REDIS_URL=redis://127.0.0.1:$(REDIS_PORT)/0"
	redis-server --port $(REDIS_PORT) --bind 127.0.0.1 --save "" --appendonly no --stream-node-max-entries 16 --hash-max-listpack-value 1024

clean:
	rm -rf $(VENV) var/static .pytest_cache
