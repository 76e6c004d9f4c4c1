# driftwatch as a small static image that runs as a non-root user:
#   docker build -t REGISTRY/driftwatch:0.1.0 .
# The binary is linked statically against musl (rustls with ring: no OpenSSL, no
# glibc), so the runtime image is distroless "static": CA certificates, /etc/passwd
# with the nonroot user (65532), no shell.

FROM rust:1.95-bookworm AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends musl-tools \
 && rm -rf /var/lib/apt/lists/* \
 && rustup target add x86_64-unknown-linux-musl
ENV CC_x86_64_unknown_linux_musl=musl-gcc
WORKDIR /src
# Dependencies first, so a source change does not rebuild them.
COPY Cargo.toml Cargo.lock build.rs ./
COPY triggers triggers
COPY templates templates
COPY benches benches
RUN mkdir -p src && echo 'fn main() {}' > src/main.rs && touch src/lib.rs \
 && cargo build --release --locked --target x86_64-unknown-linux-musl \
 && rm -rf src
COPY src src
RUN touch src/main.rs src/lib.rs \
 && cargo build --release --locked --target x86_64-unknown-linux-musl \
 && cp target/x86_64-unknown-linux-musl/release/driftwatch /driftwatch

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /driftwatch /usr/local/bin/driftwatch
USER 65532:65532
EXPOSE 9090
ENTRYPOINT ["/usr/local/bin/driftwatch"]
CMD ["run"]
