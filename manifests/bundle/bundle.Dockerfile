# The bundle image OLM pulls: the registry+v1 layout of this directory (written by
# `numaresources bundle --output-dir DIR`), with the labels metadata/annotations.yaml repeats.
#
#   podman build -f manifests/bundle/bundle.Dockerfile -t REGISTRY/numaresources-bundle:v0.1.0 manifests/bundle
#
# (Needs nothing from a registry: FROM scratch. Not built by CI here.)
FROM scratch
LABEL operators.operatorframework.io.bundle.mediatype.v1=registry+v1
LABEL operators.operatorframework.io.bundle.manifests.v1=manifests/
LABEL operators.operatorframework.io.bundle.metadata.v1=metadata/
LABEL operators.operatorframework.io.bundle.package.v1=numaresources-operator
LABEL operators.operatorframework.io.bundle.channels.v1=alpha
LABEL operators.operatorframework.io.bundle.channel.default.v1=alpha
COPY manifests /manifests/
COPY metadata /metadata/
