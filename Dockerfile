# syntax=docker/dockerfile:1
# The operator's image (default target) and the vLLM emulator's test image (`--target
# vllm-emulator`). Build it with images/build, which ties the tag to the chart's appVersion:
#
#   images/build                       # ghcr.io/modelsphere/llmscaler:<appVersion>
#   images/build --push                # and push it
#
# A build whose VERSION differs from charts/llmscaler/Chart.yaml's appVersion is refused here
# too, so `docker build --build-arg VERSION=...` by hand cannot publish a mismatching tag.
ARG RUST_IMAGE=docker.io/library/rust:1.95-bookworm
ARG RUNTIME_IMAGE=gcr.io/distroless/cc-debian12:nonroot

FROM ${RUST_IMAGE} AS builder
ARG VERSION
# cmake and clang: aws-lc-sys (rustls' crypto provider); fontconfig: only the emulator's crate.
RUN apt-get update && apt-get install -y --no-install-recommends cmake clang pkg-config libfontconfig1-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN app="$(sed -nE 's/^appVersion: *"?([^"]+)"?.*$/\1/p' charts/llmscaler/Chart.yaml)" && \
    if [ -z "${VERSION}" ] || [ "${VERSION}" != "${app}" ]; then \
      echo "error: image version '${VERSION}' is not the chart's appVersion '${app}'; fix: build with --build-arg VERSION=${app} (images/build does)" >&2; \
      exit 1; \
    fi
# No default features: no `simulate --plot`, so no plotting or font library (e2e/check-image-binary).
RUN --mount=type=cache,target=/usr/local/cargo/registry --mount=type=cache,target=/src/target \
    cargo build --release --locked -p llmscaler --no-default-features --bin llmscaler && \
    mkdir -p /out && cp target/release/llmscaler /out/

# The vLLM emulator (test chart charts/vllm-emulator), built only for `--target vllm-emulator`.
# Its crate draws the demo's picture, so it links fontconfig: the libraries ldd names are copied.
FROM builder AS emulator-builder
RUN --mount=type=cache,target=/usr/local/cargo/registry --mount=type=cache,target=/src/target \
    cargo build --release --locked -p llmscaler-e2e --bin vllm-emulator && \
    mkdir -p /out/root && cp target/release/vllm-emulator /out/root/ && \
    ldd /out/root/vllm-emulator | grep -oE '/[^ ]+' | xargs -r -I{} cp --parents -L {} /out/root/

FROM ${RUNTIME_IMAGE} AS vllm-emulator
COPY --from=emulator-builder /out/root/ /
USER 65532:65532
ENTRYPOINT ["/vllm-emulator"]
CMD ["serve"]

# The operator: distroless (glibc, CA certificates, no shell), user 65532, read-only root works.
FROM ${RUNTIME_IMAGE} AS operator
ARG VERSION
LABEL org.opencontainers.image.title="llmscaler" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.source="https://github.com/modelsphere/llmscaler" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=builder /out/llmscaler /llmscaler
USER 65532:65532
ENTRYPOINT ["/llmscaler"]
CMD ["run"]
