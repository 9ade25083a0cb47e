#!/bin/sh
# System tools that pip cannot install, installed with the system's package manager when this user may (root, or
# sudo without a password); otherwise says what to run. Idempotent: does nothing when every tool is present.
#
#   system_tools.sh [CHECK=PACKAGE ...]     default: fio=fio (R1's device limit, for `make evidence`)
#
# CHECK is a command that must be on PATH, or font:LANG for a font that fontconfig has for LANG (fc-list :lang=LANG).
# `make test` also asks for chromium and a CJK font (kvtier screenshots: how readers see the pages).
set -eu
[ $# -gt 0 ] || set -- fio=fio
missing=""
for pair in "$@"; do
    check="${pair%%=*}"
    package="${pair#*=}"
    case "$check" in
        font:*) fc-list ":lang=${check#font:}" 2>/dev/null | grep -q . || missing="$missing $package" ;;
        *) command -v "$check" >/dev/null 2>&1 || missing="$missing $package" ;;
    esac
done
[ -z "$missing" ] && exit 0
if command -v apt-get >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ]; then
        SUDO=""
    elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        SUDO="sudo -n"
    else
        echo "kvtier: missing system packages:$missing; install them (apt-get install$missing)" >&2
        exit 0
    fi
    echo "kvtier: installing$missing (apt-get)" >&2
    $SUDO apt-get update -qq >/dev/null || true
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
else
    echo "kvtier: missing system packages:$missing; install them with your package manager" >&2
fi
