# syntax=docker/dockerfile:1.7
# ralph-operator image: one static `ralph` binary on distroless/static, non-root.
# The same image serves the controller (`ralph controller`), the agent Pods' init
# container (`ralph install`, copies the binary for the runner) and their sidecar
# (`ralph sidecar`).
#
#   docker build -t ralph-operator .                 # release image
#   docker build --target e2e -t ralph-operator:e2e . # plus the e2e agent scripts under /e2e
#
# The binary is linked statically against glibc (crt-static) with the toolchain the
# rust image ships: no download beyond crates.io at build time (a musl build would need
# the musl target or Alpine packages). It needs no DNS for the API server (in-cluster
# config uses the service IP), so static glibc's missing NSS modules do not matter.

ARG RUST_VERSION=1.95

FROM rust:${RUST_VERSION} AS builder
WORKDIR /build
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/build/target \
    set -eux; \
    host="$(rustc -vV | sed -n 's/^host: //p')"; \
    RUSTFLAGS="-C target-feature=+crt-static" \
      cargo build --release --locked --bin ralph --target "$host"; \
    install -D -m 0755 "target/$host/release/ralph" /out/ralph; \
    if ldd /out/ralph 2>/dev/null | grep -q '=>'; then \
      echo "ralph is dynamically linked; the distroless/static base cannot run it" >&2; exit 1; \
    fi; \
    /out/ralph --version

# The binary lives at /usr/local/bin/ralph, never under /ralph: agent Pods mount directories
# at /ralph/bin, /ralph/prompt and /ralph/run, so an agent image built FROM this one (the e2e
# image is one) must have no file there. tests/kubelet_standin.rs checks this file for it.
FROM gcr.io/distroless/static:nonroot AS runtime
COPY --from=builder /out/ralph /usr/local/bin/ralph
# distroless "nonroot" (65532), numeric so the kubelet can verify runAsNonRoot.
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/ralph"]
CMD ["controller"]

# The e2e suite's image (RALPH_E2E_IMAGE): the release image plus the scripted agent's
# scripts, played by `/ralph/bin/ralph agent script /e2e/<script>` in agent Pods.
FROM runtime AS e2e
COPY tests/e2e/scripts/ /e2e/

FROM runtime
