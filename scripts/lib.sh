# Shared by scripts/serve and scripts/test: everything a fresh Debian machine with Python 3.11
# needs is installed here, never by hand. Each step says what it does on one line (`==> ...`)
# before it starts, since some take minutes (Spark's wheel, Java, Chromium).

PYTHON=${PYTHON:-python3}
# The virtualenv everything goes into (tests point it elsewhere to run these scripts).
VENV=${VENV:-.venv}

step() {
  echo "==> $*" >&2
}

as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
    echo "need root to run: $*" >&2; return 1; fi
}

apt_install() {
  # apt-get update once per run, and only when something is missing.
  if [ -z "${_APT_UPDATED:-}" ]; then
    step "apt-get update"
    as_root apt-get update -qq >/dev/null
    _APT_UPDATED=1
  fi
  step "apt-get install $*"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

ensure_venv() {
  if [ ! -x "$VENV/bin/python" ]; then
    step "creating the virtualenv $VENV"
    if ! "$PYTHON" -m venv "$VENV" 2>/dev/null; then
      # Debian ships venv support as a separate package.
      rm -rf "$VENV"
      apt_install python3-venv
      "$PYTHON" -m venv "$VENV"
    fi
    step "upgrading pip in $VENV"
    "$VENV/bin/python" -m pip install -q --upgrade pip
  fi
}

install_project() {
  # $1: the extras to install, e.g. "" or "[test]". Done again only when pyproject.toml is
  # newer than the last install with those extras. pip prints nothing with -q: the step line
  # says why a first run takes minutes (the [pipeline] extra downloads Spark).
  local stamp="$VENV/.infinistream-installed$1"
  if [ -f "$stamp" ] && [ "$stamp" -nt pyproject.toml ]; then
    return
  fi
  step "pip install -e .$1 (the first run downloads every dependency)"
  "$VENV/bin/python" -m pip install -q -e ".$1"
  touch "$stamp"
}

install_bench() {
  # The benchmark suite, a distribution of its own (bench/): `infinistream bench` and its tests.
  local stamp="$VENV/.infinistream-bench-installed"
  if [ -f "$stamp" ] && [ "$stamp" -nt bench/pyproject.toml ]; then
    return
  fi
  step "pip install -e ./bench (the benchmark suite)"
  "$VENV/bin/python" -m pip install -q -e ./bench
  touch "$stamp"
}

install_js_client() {
  # nats.js, the second client implementation the end-to-end tests run (tests/js), at the
  # versions pinned in tests/js/package-lock.json; reinstalled only when missing or stale.
  if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    apt_install nodejs npm
  fi
  local stamp=tests/js/node_modules/.package-lock.json
  if [ ! -f "$stamp" ] || [ tests/js/package-lock.json -nt "$stamp" ] \
    || [ tests/js/package.json -nt "$stamp" ]; then
    step "npm ci --prefix tests/js (nats.js for the end-to-end tests)"
    npm ci --prefix tests/js --no-audit --no-fund --loglevel=error >/dev/null
  fi
}

ensure_etcd() {
  # A real etcd for the etcd metadata backend's tests (tests/support/etcdserver.py starts it);
  # Debian ships the server binary as etcd-server.
  if ! command -v etcd >/dev/null; then
    apt_install etcd-server
  fi
}

ensure_java() {
  # Spark, which runs the pipeline jobs and their tests, needs Java 17 or newer.
  if ! command -v java >/dev/null; then
    apt_install default-jre-headless
  fi
}

ensure_strace() {
  # The power-loss test records the agent's writes and syncs with strace, then loses what no
  # sync covered (tests/fault/test_fault_power_loss.py).
  if ! command -v strace >/dev/null; then
    apt_install strace
  fi
}

ensure_netns() {
  # The partition tests put an agent in a network namespace linked to the host by a veth pair
  # and cut its links with nftables rules (tests/fault/netns.py): ip and nft, run as root.
  if ! command -v ip >/dev/null; then
    apt_install iproute2
  fi
  if ! command -v nft >/dev/null; then
    apt_install nftables
  fi
}

ensure_chromium() {
  # The web console's browser test drives Debian's Chromium with Playwright (from PyPI, never
  # `playwright install`: the browser comes from Debian).
  if [ ! -x /usr/bin/chromium ]; then
    apt_install chromium
  fi
}

ensure_postgresql() {
  # The Iceberg tables' PostgreSQL catalog is tested against a real PostgreSQL server, which
  # the test starts in a temporary directory from Debian's binaries (tests/support/pgserver.py).
  if ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; then
    apt_install postgresql
  fi
}
