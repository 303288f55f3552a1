#!/bin/bash
set -euo pipefail
sed -i -e 's/^debug = true$/debug = false/' -e 's/^port = 8000$/port = 8080/' /app/service.ini
