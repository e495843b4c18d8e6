# A profile's own image: the stoker image plus what its pods preload, so no pod installs
# torch at start. One per profile that needs more than the base, e.g. for a profile
#
#   [profiles.torch]
#   preload = ["torch"]
#   image = "registry.example/stoker-torch:0.1.0"
#
# build it from the repository root (after the base image, deploy/images/Dockerfile):
#
#   docker build -f deploy/images/Dockerfile.profile \
#     --build-arg BASE=registry.example/stoker:0.1.0 \
#     --build-arg PACKAGES="torch==2.5.1" \
#     --build-arg INDEX_URL=https://download.pytorch.org/whl/cu124 \
#     -t registry.example/stoker-torch:0.1.0 .
#
# (INDEX_URL https://download.pytorch.org/whl/cpu for a CPU-only profile's torch).
ARG BASE=registry.example/stoker:0.1.0
FROM ${BASE}
ARG PACKAGES
ARG INDEX_URL=https://pypi.org/simple
USER 0
RUN test -n "$PACKAGES" && pip install --index-url "$INDEX_URL" --extra-index-url https://pypi.org/simple $PACKAGES
USER 65534:65534
