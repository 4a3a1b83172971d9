# Sluice's container image: a static binary on a distroless base, run as a
# non-root user. Build it with `make image` (docker or podman); see
# docs/deploy.md. There is no HEALTHCHECK: Kubernetes probes /healthcheck on
# the HTTP port (deploy/kubernetes/).

# The builder: modules first, so a change to the code alone reuses the
# downloaded module cache layer.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download && go mod verify
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/sluice ./cmd/sluice

# The image: no shell, no package manager; CA certificates (for TLS to
# Redis, memcached and xDS servers) and /etc/passwd come with the base.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/sluice /sluice
# distroless's nonroot user, by number so that runAsNonRoot can verify it.
USER 65532:65532
# The debug port (/metrics, /rlconfig, /debug/pprof/) listens on every
# interface inside the container, so that Prometheus can scrape it; Sluice
# keeps it on 127.0.0.1 elsewhere. SLUICE_DEBUG_ADDR wins over
# envoyproxy/ratelimit's DEBUG_HOST/DEBUG_PORT: set it to move the port.
ENV SLUICE_DEBUG_ADDR=:6070
# HTTP (/json, /v1/*, /healthcheck), gRPC, debug.
EXPOSE 8080 8081 6070
ENTRYPOINT ["/sluice"]
CMD ["serve"]
