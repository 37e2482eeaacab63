#!/bin/sh
# Generate configure and Makefile.in (needs autoconf, automake and pkg-config's pkg.m4).
set -e
cd "$(dirname "$0")"
autoreconf --force --install --warnings=all
echo "Now run ./configure && make && make install"
