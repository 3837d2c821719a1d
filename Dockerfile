# syntax=docker/dockerfile:1
#
# The pgadvisory CLI in an image: one static binary, no shell, a non-root user.
#
#   docker build -t pgadvisory .                        # the default: distroless static
#   docker build --target copier -t pgadvisory-copier . # plus busybox cp, for an emptyDir
#
# docs/migrations.md shows both in an init container. The machines this project is
# developed on have no container engine: this file has not been built there. The go build
# line below has: cmd/pgadvisory's TestBinaryIsSlimAndStatic checks that such a binary is
# static and links no Docker or testcontainers code.

FROM golang:1.25 AS build
WORKDIR /src
COPY . .
# No "go mod download": go build fetches only the modules the CLI's packages come from,
# not the test harness's (testcontainers, the Docker client).
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/pgadvisory ./cmd/pgadvisory

# The binary and busybox's cp: an init container copies it into a shared volume
# ("args: [/tools/pgadvisory]") for a container whose image you do not build.
FROM busybox:1.37.0-musl AS copier
COPY --from=build /out/pgadvisory /pgadvisory
USER 65532:65532
ENTRYPOINT ["cp", "/pgadvisory"]

# The default target: nothing but the binary, run as distroless's nonroot user (65532).
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/pgadvisory /pgadvisory
USER nonroot:nonroot
ENTRYPOINT ["/pgadvisory"]
