# neardupd in a container: built with meson on Debian 12, run on Debian 12
# slim with only the shared libraries it loads, as an unprivileged user.
#   docker build -t neardup:0.1.0 .
#   docker run -d --name neardup -p 8080:8080 -v neardup-data:/var/lib/neardup \
#       --stop-timeout 30 neardup:0.1.0
# or podman, the same way (podman build --format docker: OCI drops HEALTHCHECK).
# Settings: NEARDUP_* variables (docker run -e, or --env-file
# deploy/neardupd.env); `docker run --rm neardup:0.1.0 --help` lists them.
#
# CI builds and runs this image with podman on a debian:bookworm-slim made by
# debootstrap (tests/fresh/run.sh container). Every RUN line is one step of
# deploy/container/build.sh, which tests/integration/test_container.py also
# runs on the host.

FROM debian:bookworm-slim AS build
WORKDIR /src
COPY deploy/ deploy/
RUN bash deploy/container/build.sh build-deps
COPY . .
RUN bash deploy/container/build.sh build /src /out /tmp/build
RUN bash deploy/container/build.sh check-runtime /out

FROM debian:bookworm-slim
COPY deploy/container/build.sh deploy/container/runtime-packages.txt /tmp/neardup-build/
RUN bash /tmp/neardup-build/build.sh runtime-deps --clean \
    && bash /tmp/neardup-build/build.sh runtime-user \
    && rm -rf /tmp/neardup-build
COPY --from=build /out/ /
# Listen on every interface of the container; keep the store in the volume.
# Stop: SIGTERM drains (see README.md, "Operations"): give docker stop more
# than NEARDUP_DRAIN_DELAY + NEARDUP_DRAIN_TIMEOUT (0 + 10 s by default).
ENV NEARDUP_LISTEN=0.0.0.0:8080 \
    NEARDUP_DATA=/var/lib/neardup
VOLUME ["/var/lib/neardup"]
EXPOSE 8080
USER 10001:10001
WORKDIR /var/lib/neardup
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=10s --timeout=3s --start-period=60s --retries=3 \
    CMD ["/usr/libexec/neardup/healthcheck"]
ENTRYPOINT ["/usr/bin/neardupd"]
