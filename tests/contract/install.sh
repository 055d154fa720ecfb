#!/usr/bin/env bash
# Installs the npm packages that tests/integration/test_contract.py uses (an
# OpenAPI 3.1 validator, openapi-typescript, openapi-fetch, TypeScript),
# exactly as package-lock.json pins them, into tests/contract/node_modules
# (not in git) with npm ci; again only when the lock changed (its sha256 is
# kept in node_modules/.neardup-lock-sha256). Needs node and npm
# (deploy/install-deps.sh --test installs Debian's). tests/run-all.sh runs it
# before the suites; the server never needs it.
set -euo pipefail
cd "$(dirname "$0")"
if ! command -v npm >/dev/null || ! command -v node >/dev/null; then
    echo "contract: node and npm are needed (deploy/install-deps.sh --test installs them)" >&2
    exit 1
fi
sum="$(sha256sum package-lock.json | cut -d' ' -f1)"
stamp=node_modules/.neardup-lock-sha256
if [[ "$(cat "$stamp" 2>/dev/null)" == "$sum" ]]; then
    echo "contract: tests/contract/node_modules is up to date"
    exit 0
fi
echo "contract: npm ci in tests/contract (node $(node --version), npm $(npm --version))"
npm ci --ignore-scripts --no-audit --no-fund
echo "$sum" >"$stamp"
