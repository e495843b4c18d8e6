#!/usr/bin/env bash
# Sets up a fresh machine for stoker: system packages, a virtual environment in .venv,
# and the package itself (editable). `scripts/bootstrap.sh dev` adds the test tools and
# the PyTorch forecaster extra.
set -euo pipefail
cd "$(dirname "$0")/.."
mode="${1:-run}"

need_apt=()
command -v bwrap >/dev/null 2>&1 || need_apt+=(bubblewrap)
if [ "$mode" = dev ]; then
  # the PostgreSQL server binaries: the store's tests start a private server
  # (tests/conftest.py); a broker itself runs on SQLite or on a PostgreSQL of yours
  compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || command -v initdb >/dev/null 2>&1 \
    || need_apt+=(postgresql)
  # the dashboard's browser test drives Debian's headless chromium through its driver
  [ -x /usr/bin/chromium ] || need_apt+=(chromium)
  [ -x /usr/bin/chromedriver ] || need_apt+=(chromium-driver)
fi
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    # the tests start private servers of their own: no default cluster (none left running)
    mkdir -p /etc/postgresql-common/createcluster.d
    echo "create_main_cluster = false" >/etc/postgresql-common/createcluster.d/stoker.conf
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
  else
    echo "bootstrap: please install ${need_apt[*]} (sudo apt-get install ${need_apt[*]})" >&2
  fi
fi

[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
if [ "$mode" = dev ]; then
  # The CPU build of torch 2.13.0 is installed by exact version first, so the extra's
  # range is already met and no multi-GB CUDA build is fetched.
  .venv/bin/python -m pip install -q "torch==2.13.0" || echo "bootstrap: torch unavailable; torch tests will skip" >&2
  .venv/bin/python -m pip install -q -e '.[dev]'
else
  # the kubernetes extra (lightkube, PyYAML) is small: stoker deploy render works out of the box
  .venv/bin/python -m pip install -q -e '.[kubernetes]'
fi
