#!/bin/sh
# System tools the measurements call that pip cannot install: fio (R1's device limit). Installed with the
# system's package manager when this user may (root, or sudo without a password); otherwise says what to run.
# Idempotent: does nothing when every tool is already on PATH.
set -eu
missing=""
for tool in fio; do
    command -v "$tool" >/dev/null 2>&1 || missing="$missing $tool"
done
[ -z "$missing" ] && exit 0
if command -v apt-get >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ]; then
        SUDO=""
    elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        SUDO="sudo -n"
    else
        echo "kvtier: missing system tools:$missing; install them (apt-get install$missing) for R1" >&2
        exit 0
    fi
    echo "kvtier: installing$missing (apt-get)" >&2
    $SUDO apt-get update -qq >/dev/null || true
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
else
    echo "kvtier: missing system tools:$missing; install them with your package manager for R1" >&2
fi
