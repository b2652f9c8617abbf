#!/bin/sh
# A static tui-gateway for trial images, whatever libc (or none) they carry: x86-64 Linux, musl,
# no shared library needed. Prints the binary's path; pass it as `--ak binary=PATH`.
#
# The musl target comes from rustup (the toolchain rust-toolchain pins, if any). Without a
# musl C compiler (`musl-gcc`, `x86_64-linux-musl-gcc`) the host's gcc builds the C parts
# (SQLite, ring) against musl's ABI, which x86-64 glibc headers share for what they use;
# SQLITE_DISABLE_LFS keeps SQLite off glibc's `*64` aliases, which musl has not.
set -eu
cd "$(dirname "$0")/../.."
target=x86_64-unknown-linux-musl
rustup target add "$target" >&2
if command -v musl-gcc >/dev/null 2>&1; then
    cc=musl-gcc
elif command -v x86_64-linux-musl-gcc >/dev/null 2>&1; then
    cc=x86_64-linux-musl-gcc
else
    cc=gcc
fi
CC_x86_64_unknown_linux_musl="${CC_x86_64_unknown_linux_musl:-$cc}" \
CFLAGS_x86_64_unknown_linux_musl="${CFLAGS_x86_64_unknown_linux_musl:--DSQLITE_DISABLE_LFS}" \
    cargo build --release --target "$target" --bin tui-gateway >&2
out="${CARGO_TARGET_DIR:-target}/$target/release/tui-gateway"
# Trials upload it: no debug information (75 MB with it).
strip "$out" 2>/dev/null || true
echo "$out"
