# Sourced by the device scripts (validation/h200_*.sh): installs the wheels carried to the device machine, where it has
# no package index, and puts them on the path. WHEELS (default .dev_light) holds whl/ (msgspec, py-spy), whl_cupti/
# (cupti-python) and whl_cb/ (cuda-bindings 13, installed only where the machine's is missing or older).
# Sets PYTHONPATH (/tmp/site, the repo's src), PATH (py-spy) and PYTHONUNBUFFERED; cupti-python goes to /tmp/cupti_site,
# which a script puts on the PYTHONPATH of the jobs that should find it. Exits 3 when a wheel will not install.
WHEELS=${WHEELS:-.dev_light}
_pip() { python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$@"; }
_pip /tmp/site "$WHEELS"/whl/*.whl || exit 3
_pip /tmp/cupti_site "$WHEELS"/whl_cupti/*.whl || exit 3
python3 -c "import cuda.bindings, sys; sys.exit(int(cuda.bindings.__version__.split('.')[0]) < 13)" 2>/dev/null || \
  { echo "carried cuda-bindings"; _pip /tmp/cupti_site "$WHEELS"/whl_cb/*.whl; }
export PYTHONPATH=/tmp/site:$PWD/src PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
