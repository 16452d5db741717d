# Sourced by the PM-sampling device scripts (validation/h200_pm_probe.sh, h200_pm_overlap.sh), after device_site.sh:
# installs cupti-python 13.3+ (PM sampling's bindings) from WHEELS/whl_pm into /tmp/pm_site, cuda-bindings 13.0.3 from
# WHEELS/whl_pm_cb where the machine's is older than cupti-python asks, and puts the libcupti torch's CUDA wheels carry
# (nvperf beside it) on LD_LIBRARY_PATH. Exits 3 when a wheel will not install.
_pip /tmp/pm_site "$WHEELS"/whl_pm/*.whl || exit 3
python3 -c "import cuda.bindings as b, sys; v=tuple(int(x) for x in b.__version__.split('.')[:3]); sys.exit(v < (13, 0, 2))" \
  2>/dev/null || { echo "carried cuda-bindings 13.0.3"; _pip /tmp/pm_site "$WHEELS"/whl_pm_cb/*.whl; }
LIBDIR=$(python3 -c "import glob, sys; p=[g for r in sys.path for g in glob.glob(r + '/nvidia/*/lib/libcupti.so*')]; print(p[0].rsplit('/', 1)[0] if p else '')")
echo "libcupti dir: ${LIBDIR:-none}"
export LD_LIBRARY_PATH=${LIBDIR}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
