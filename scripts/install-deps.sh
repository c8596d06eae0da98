#!/usr/bin/env bash
# Installs what berth needs when it is missing: Debian packages (root installs them; anyone
# else is told what to install), Node and npm among them (berth embeds its web app, built
# from web/ with npm packages). With --tests, also what the tests need: python3 (the
# model stand-in), tmux and vi (terminals), sqlite3 (the upgrade tests), qemu, chromium (the web app's browser tests),
# Claude Code from the npm registry (the harness test), and the pinned E2B Python SDK from PyPI
# in a venv under target/ (the E2B compatibility test), berth's own Python SDK with pinned
# httpx and pytest in another (its test), the official MCP Python SDK in a third (the MCP
# server's test), berth's own TypeScript SDK's npm packages (its test), PostgreSQL's server
# binaries (the store's tests on Postgres), Prometheus' text format parser (/metrics), and
# the deployment manifests' offline validators from PyPI in a venv (kubectl, which renders
# deploy/k8s, has no Debian package: it is reported when missing, not installed). With --bench,
# also nginx with its stream module (the egress benchmark's comparison).
set -euo pipefail
for_tests=false
for_bench=false
for arg in "$@"; do
  case "$arg" in
    --tests) for_tests=true ;;
    --bench) for_bench=true ;;
    *) echo "usage: $0 [--tests] [--bench]" >&2; exit 2 ;;
  esac
done

# command → Debian package
declare -A needed=(
  [runc]=runc
  [cc]=gcc
  # box volumes on every runtime and VM images (crates/image): ext4 images made and checked
  # without mounting (mkfs.ext4, e2fsck, debugfs), module deps, the debian template
  [mkfs.ext4]=e2fsprogs
  [depmod]=kmod
  [debootstrap]=debootstrap
  # the web app's build (crates/webapp runs web/build.mjs, its npm packages from the lockfile)
  [node]=nodejs
  [npm]=npm
)
missing=()
for cmd in "${!needed[@]}"; do
  # sbin tools are not on a non-root PATH
  command -v "$cmd" >/dev/null 2>&1 || [ -x "/usr/sbin/$cmd" ] || [ -x "/sbin/$cmd" ] ||
    missing+=("${needed[$cmd]}")
done
# static glibc for berth-init
[ -f /usr/lib/x86_64-linux-gnu/libc.a ] || [ "$(uname -m)" != x86_64 ] || missing+=(libc6-dev)

if $for_tests; then
  command -v python3 >/dev/null 2>&1 || missing+=(python3)
  # terminals are tested through a real terminal multiplexer, with a full-screen program
  command -v tmux >/dev/null 2>&1 || missing+=(tmux)
  command -v vi >/dev/null 2>&1 || missing+=(vim-tiny)
  # `berth completion`'s zsh and fish scripts are parsed by those shells
  command -v zsh >/dev/null 2>&1 || missing+=(zsh)
  command -v fish >/dev/null 2>&1 || missing+=(fish)
  # the qemu runtime's tests boot microVMs
  command -v qemu-system-x86_64 >/dev/null 2>&1 || missing+=(qemu-system-x86)
  # the web app's end-to-end tests drive Debian's chromium (web/e2e), screenshots need a font
  [ -x /usr/bin/chromium ] || missing+=(chromium)
  [ -d /usr/share/fonts/truetype/dejavu ] || missing+=(fonts-dejavu-core)
  command -v pebble >/dev/null 2>&1 || missing+=(pebble) # ACME tests: a real ACME CA and its mock DNS
  command -v curl >/dev/null 2>&1 || missing+=(curl) # the cookie tests' browser stand-in (its cookie jar)
  command -v sqlite3 >/dev/null 2>&1 || missing+=(sqlite3) # the upgrade tests write earlier releases' databases
  # the E2B SDK's venv (Debian splits venv's pip bootstrap into its own package)
  python3 -c 'import ensurepip' >/dev/null 2>&1 || missing+=(python3-venv)
  # the store's conformance suite and the many-hosts tests start their own PostgreSQL
  # servers from Debian's binaries (a test's own initdb + postgres on a free port)
  compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || missing+=(postgresql)
  # /metrics is checked with the Prometheus text format's reference parser
  python3 -c 'import prometheus_client.parser' >/dev/null 2>&1 || missing+=(python3-prometheus-client)
fi

# The egress bench runs its own nginx from a config in a temp dir (stream module,
# ssl_preread). Debian builds the stream module as a separate package. Note that installing
# `nginx` also enables and starts Debian's own nginx service (port 80); the bench does not
# use it.
if $for_bench; then
  command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || missing+=(nginx)
  # built in (`--with-stream`), or Debian's dynamic module
  { nginx -V 2>&1 | grep -qE -- '--with-stream( |$)'; } ||
    [ -f /usr/lib/nginx/modules/ngx_stream_module.so ] || missing+=(libnginx-mod-stream)
fi

if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "berth needs these Debian packages: ${missing[*]}" >&2
    echo "install them with: sudo apt-get install ${missing[*]}" >&2
    exit 1
  fi
  echo "installing: ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# Claude Code (npm registry), for the test that runs it unmodified as a box's harness.
# Optional: without npm (or as non-root) that test reports itself skipped.
claude_dir=${BERTH_CLAUDE_CODE_DIR:-/srv/berth/claude-code}
if $for_tests && [ "$(id -u)" -eq 0 ] && command -v npm >/dev/null 2>&1 && [ ! -e "$claude_dir/node_modules/.bin/claude" ]; then
  echo "installing Claude Code into $claude_dir (npm, about 240 MB)" >&2
  mkdir -p "$claude_dir"
  npm install --prefix "$claude_dir" --no-audit --no-fund --loglevel=error @anthropic-ai/claude-code
  chmod -R a+rX "$claude_dir"
fi

# A venv under target/ with what its test needs from PyPI ("$@", pinned), kept across runs:
# the marker is a hash of the pins, so a rerun installs nothing until they change. Without
# PyPI it is left out, and the tests of part $3 skip.
pinned_venv() {
  local venv=$1 what=$2 part=$3
  shift 3
  local marker
  marker="$venv/.pins-$(echo "$*" | sha256sum | cut -c1-16)"
  if ! $for_tests || [ -e "$marker" ]; then
    return 0
  fi
  echo "installing $what ($*) into $venv (PyPI)" >&2
  rm -rf "$venv"
  if python3 -m venv "$venv" &&
    "$venv/bin/pip" install --quiet --disable-pip-version-check "$@"; then
    touch "$marker"
  else
    echo "could not install $what; its test will skip (part $part)" >&2
  fi
}
sdk_root="$(cd "$(dirname "$0")/.." && pwd)"

# The E2B Python SDK and its desktop SDK, unmodified, for the tests that drive berth with
# them (crates/cli/tests/e2b_sdk.rs).
pinned_venv "$sdk_root/target/e2b-sdk/venv" "the E2B Python SDKs" e2b-sdk "e2b==2.63.0" "e2b-desktop==2.7.2"

# berth's own Python SDK (sdk/python), installed editable beside the versions its tests pin
# (crates/cli/tests/sdk_python.rs runs its pytest suite).
pinned_venv "$sdk_root/target/sdk-python/venv" "berth's Python SDK and its test tools" sdk-python \
  httpx==0.28.1 websockets==17.4 pytest==9.2.0 -e "$sdk_root/sdk/python"

# The official MCP Python SDK: its client drives `berth mcp` (stdio) and the daemon's
# `/mcp` (Streamable HTTP) in crates/cli/tests/mcp.rs.
pinned_venv "$sdk_root/target/mcp-sdk/venv" "the MCP Python SDK" mcp-sdk "mcp==2.3.0"

# The deployment manifests under deploy/, checked without a cluster
# (crates/cli/tests/deploy_manifests.rs): kubernetes-validate carries the Kubernetes API's
# schemas, python-hcl2 parses the Nomad jobs (crates/testkit/src/deploy_validate.rs pins the
# same). kubectl renders deploy/k8s with its kustomize; Debian has no package of it, so a
# machine without one is told, and the kustomize test skips (part kubectl).
pinned_venv "$sdk_root/target/deploy-validate/venv" "the deployment manifests' validators" deploy-validate \
  kubernetes-validate==1.37.0 python-hcl2==8.1.4
if $for_tests && ! command -v kubectl >/dev/null 2>&1; then
  echo "no kubectl on PATH (no Debian package): the kustomize test of deploy/k8s will skip (part kubectl)" >&2
fi

# moto, the S3 stand-in the chunk store's tests and bench run against
# (crates/testkit/src/moto.rs pins the same).
pinned_venv "$sdk_root/target/moto/venv" "moto, the S3 stand-in" moto "moto[server]==5.2.5"

# berth's own TypeScript SDK (sdk/typescript): its npm packages from its lockfile (npm ci)
# and a first build (crates/cli/tests/sdk_typescript.rs builds it again from this checkout
# and runs its node --test suite). The marker is the lockfile's hash, so a rerun installs
# nothing until the lockfile changes. Without npm or the registry it is left out, and that
# test skips (part sdk-typescript).
ts_sdk="$sdk_root/sdk/typescript"
ts_marker="$ts_sdk/node_modules/.berth-lock-$(sha256sum "$ts_sdk/package-lock.json" | cut -c1-16)"
if $for_tests && command -v npm >/dev/null 2>&1 && [ ! -e "$ts_marker" ]; then
  echo "installing berth's TypeScript SDK's npm packages into $ts_sdk/node_modules (npm ci) and building it" >&2
  if (cd "$ts_sdk" && npm ci --no-audit --no-fund --loglevel=error >/dev/null && npm run --silent build >/dev/null); then
    touch "$ts_marker"
  else
    echo "could not install or build berth's TypeScript SDK; its test will skip (part sdk-typescript)" >&2
  fi
fi

# E2B's npm SDK at the version berth pins, from the npm registry, under target/ beside the
# Python one (crates/cli/tests/e2b_npm.rs runs it).
e2b_npm=2.51.0
e2b_node="$(cd "$(dirname "$0")/.." && pwd)/target/e2b-sdk/node"
if $for_tests && command -v npm >/dev/null 2>&1 && [ ! -e "$e2b_node/.e2b-$e2b_npm" ]; then
  echo "installing the E2B npm SDK $e2b_npm into $e2b_node (npm registry)" >&2
  rm -rf "$e2b_node" && mkdir -p "$e2b_node"
  if npm install --prefix "$e2b_node" --no-audit --no-fund --loglevel=error "e2b@$e2b_npm" >/dev/null; then
    touch "$e2b_node/.e2b-$e2b_npm"
  else
    echo "could not install the E2B npm SDK; its tests will skip (part e2b-npm)" >&2
  fi
fi
