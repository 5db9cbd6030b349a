#!/usr/bin/env bash
# The newcomer's first run, on a machine that has already run the suite: removes the Debian
# packages the suite installs (tests/tools/packages) with `apt-get purge --autoremove`, then
# runs .ci/run in a clean clone of this checkout's HEAD, so that every install the suite
# makes happens again, as on a fresh machine. Prints how long it took and the totals.
#
# Usage (as root, or with passwordless sudo; it removes packages machine-wide):
#   tests/tools/fresh-machine.sh --yes            purge, clone, run .ci/run
#   tests/tools/fresh-machine.sh --dry-run        say what would be purged; change nothing
#
# Kept, because a machine that can build tickd at all has them, and removing them takes
# the machine with them: gcc and libc6-dev (Rust links through them), python3 (Debian's
# own tools are written in it), openssl (ca-certificates, and so every HTTPS download,
# depends on it), and a Node.js the machine already runs (nodejs, npm: a NodeSource
# nodejs is not Debian's, and the suite installs Debian's only when `node` is missing).
# Everything else the suite installs is purged, python3-venv and protobuf-compiler
# included. TICKD_FRESH_KEEP adds packages to keep (space-separated).
#
# The clone is made under $TMPDIR (or /tmp) and removed afterwards unless
# TICKD_FRESH_KEEP_CLONE=1; cargo's download cache (~/.cargo/registry) is kept, which
# saves only the download: every crate is still built from nothing.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
KEEP="gcc libc6-dev python3 openssl nodejs npm ${TICKD_FRESH_KEEP:-}"

say() { echo "fresh-machine: $*" >&2; }
die() { say "$*"; exit 1; }

mode=""
case "${1:-}" in
  --yes) mode=run ;;
  --dry-run) mode=dry ;;
  *) die "usage: $0 --yes | --dry-run (it purges Debian packages machine-wide; see its header)" ;;
esac

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }

# A listed package, and the installed packages named after it: Debian's `postgresql` is a
# metapackage over postgresql-15 (and postgresql-contrib, postgresql-common), which the
# tests find by their files, so purging the metapackage alone would leave the server
# there and nothing to install.
purge=()
while read -r package; do
  [[ " $KEEP " == *" $package "* ]] && continue
  while read -r found; do
    [[ " ${purge[*]} " == *" $found "* ]] || purge+=("$found")
  done < <(dpkg-query -W -f='${Status} ${Package}\n' "$package" "$package-*" 2>/dev/null |
    sed -n 's/^install ok installed //p')
done < <("$HERE/install-packages" --list)

as_root=()
if [[ $(id -u) -ne 0 ]]; then
  sudo -n true 2>/dev/null || die "not root and no passwordless sudo: it cannot purge packages"
  as_root=(sudo -n)
fi

if ((${#purge[@]})); then
  say "purging ${#purge[@]} packages the suite installs: ${purge[*]}"
  if [[ $mode == dry ]]; then
    "${as_root[@]}" apt-get purge --autoremove -s "${purge[@]}" | grep -E '^(Purg|Remv) ' || true
    exit 0
  fi
  "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get purge --autoremove -y -q -o DPkg::Lock::Timeout=600 "${purge[@]}" >/dev/null
else
  say "none of the packages the suite installs is installed"
  [[ $mode == dry ]] && exit 0
fi
for package in "${purge[@]}"; do
  installed "$package" && die "$package is still installed after the purge"
done

clone=$(mktemp -d "${TMPDIR:-/tmp}/tickd-fresh.XXXXXX")
if [[ ${TICKD_FRESH_KEEP_CLONE:-0} != 1 ]]; then trap 'rm -rf "$clone"' EXIT; fi
git clone -q "$REPO" "$clone"
say "running .ci/run in a clean clone of $(git -C "$clone" rev-parse --short HEAD) at $clone"
log="$clone.log"
started=$(date +%s)
status=0
(cd "$clone" && bash .ci/run) 2>&1 | tee "$log" || status=$?
elapsed=$(($(date +%s) - started))
totals=$(tail -n 1 "$log")
reinstalled=()
for package in "${purge[@]}"; do installed "$package" && reinstalled+=("$package"); done
say "status=$status seconds=$elapsed totals=\"$totals\" purged=${#purge[@]} reinstalled_by_the_suite=${#reinstalled[@]} log=$log"
exit "$status"
