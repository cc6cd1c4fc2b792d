#!/bin/sh
# Prints the newest Python >= 3.12 on this machine (current JAX needs it): a pythonX.Y on PATH
# that runs, else a pyenv installation. Exits 1, naming what to install, when there is none.
for v in 3.14 3.13 3.12; do
    if command -v "python$v" >/dev/null 2>&1 && "python$v" -c "" >/dev/null 2>&1; then
        command -v "python$v"
        exit 0
    fi
    if command -v pyenv >/dev/null 2>&1; then
        full=$(pyenv versions --bare 2>/dev/null | grep -E "^$v(\.[0-9]+)?$" | sort -t. -k3 -n | tail -n 1)
        if [ -n "$full" ] && [ -x "$(pyenv root)/versions/$full/bin/python$v" ]; then
            echo "$(pyenv root)/versions/$full/bin/python$v"
            exit 0
        fi
    fi
done
echo "jaxload needs Python >= 3.12 for current JAX and found none: install one (e.g." \
     "'pyenv install 3.13' or your system's python3.13 package), or run make with" \
     "PYTHON=/path/to/python3.12-or-newer (make test-oldest runs JAX 0.10 on any Python >= 3.10)." >&2
exit 1
