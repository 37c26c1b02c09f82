# Shared set-up steps for scripts/test and scripts/demo. Each step is idempotent.

log() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }

# Make every pyenv-installed 3.11/3.12 interpreter visible as python3.11 / python3.12.
ensure_python_versions() {
  local root
  root=$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")
  for dir in "$root"/versions/3.12.*/bin "$root"/versions/3.11.*/bin; do
    [ -x "$dir/python3" ] && PATH="$dir:$PATH"
  done
  export PATH
}

# A virtualenv with the project and its dev tools, reinstalled when pyproject.toml changes.
ensure_venv() {
  local python=${1:-python3.11}
  command -v "$python" >/dev/null || python=python3
  if [ ! -x .venv/bin/python ]; then
    log "creating .venv with $python"
    "$python" -m venv .venv
  fi
  local stamp=.venv/.installed-$(sha1sum pyproject.toml | cut -c1-12)
  if [ ! -f "$stamp" ]; then
    log "installing django-durable-jobs and its dev tools"
    .venv/bin/pip install -q --upgrade pip
    .venv/bin/pip install -q -e ".[dev]"
    rm -f .venv/.installed-*
    touch "$stamp"
  fi
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

apt_install() {
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    log "installing $*"
    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
  fi
}

# Redis on 127.0.0.1:$1, started (in-memory, no persistence) when nothing listens there.
ensure_redis() {
  local port=$1
  command -v redis-cli >/dev/null || apt_install redis-tools  # the cluster tests create theirs with it
  port_open "$port" && return 0
  command -v redis-server >/dev/null || apt_install redis-server
  log "starting redis-server on 127.0.0.1:$port"
  redis-server --daemonize yes --bind 127.0.0.1 --port "$port" --save "" --appendonly no \
    --dir "${TMPDIR:-/tmp}" --logfile "${TMPDIR:-/tmp}/redis-$port.log"
  for _ in $(seq 50); do port_open "$port" && return 0; sleep 0.1; done
  echo "redis-server did not start on port $port" >&2; return 1
}

# PostgreSQL on 127.0.0.1:5432 with trust auth for user postgres, started when not running.
ensure_postgres() {
  port_open 5432 && return 0
  if ! ls /etc/postgresql/*/main >/dev/null 2>&1; then
    apt_install postgresql
    local hba
    hba=$(ls /etc/postgresql/*/main/pg_hba.conf | head -n1)
    printf 'local all all trust\nhost all all 127.0.0.1/32 trust\nhost all all ::1/128 trust\n' > "$hba"
  fi
  log "starting PostgreSQL"
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start
  for _ in $(seq 100); do port_open 5432 && return 0; sleep 0.1; done
  echo "PostgreSQL did not start" >&2; return 1
}

# Chromium for the browser tests (Playwright drives it; it never downloads a browser of its own).
ensure_chromium() {
  [ -x /usr/bin/chromium ] || apt_install chromium
}

# prometheus and promtool, for the alert-rule tests and the end-to-end Prometheus test.
ensure_prometheus() {
  command -v promtool >/dev/null && command -v prometheus >/dev/null && return 0
  apt_install --no-install-recommends prometheus
}
