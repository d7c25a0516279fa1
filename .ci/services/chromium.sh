# Headless Chromium for the HTML report test (Debian's package). Sourced by .ci/run.
if ! command -v chromium >/dev/null 2>&1; then
  apt-get -o DPkg::Lock::Timeout=300 update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -qq chromium >/dev/null
fi
export CONTEXTFOLD_CHROMIUM="$(command -v chromium)"
