# Shared by scripts/serve and scripts/test: everything a fresh Debian machine with Python 3.11
# needs is installed here, never by hand.

PYTHON=${PYTHON:-python3}

as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
    echo "need root to run: $*" >&2; return 1; fi
}

apt_install() {
  # apt-get update once per run, and only when something is missing.
  if [ -z "${_APT_UPDATED:-}" ]; then
    as_root apt-get update -qq >/dev/null
    _APT_UPDATED=1
  fi
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

ensure_venv() {
  if [ ! -x .venv/bin/python ]; then
    if ! "$PYTHON" -m venv .venv 2>/dev/null; then
      # Debian ships venv support as a separate package.
      rm -rf .venv
      apt_install python3-venv
      "$PYTHON" -m venv .venv
    fi
    .venv/bin/python -m pip install -q --upgrade pip
  fi
}

install_project() {
  # $1: the extras to install, e.g. "" or "[test]"
  .venv/bin/python -m pip install -q -e ".$1"
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
    npm ci --prefix tests/js --no-audit --no-fund --loglevel=error >/dev/null
  fi
}

ensure_etcd() {
  # A real etcd for the etcd metadata backend's tests (tests/etcdserver.py starts it);
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
