# syntax=docker/dockerfile:1
# `sluice serve` as a container image: production dependencies only, non-root, read-only root
# file system friendly. Build from the repository's root:
#
#   docker build -t sluice .                          # or: podman build -t sluice .
#   docker run --rm -p 8080:8080 -p 8081:8081 sluice  # embedded store, the example rules
#   docker run --rm -p 8080:8080 -p 8081:8081 -e SLUICE_REDIS_URL=redis://redis:6379 \
#     -v "$PWD/rules.yaml:/etc/sluice/rules.yaml:ro" sluice
#
# Settings are the documented SLUICE_* variables (packages/server/README.md, "Settings").
# The build stage compiles the four packages the service needs, packs them as npm would publish
# them, and installs those packs alone with --omit=dev: the runtime stage holds what
# `npm install @sluice/server` would, and nothing of the monorepo's tooling.
ARG NODE_IMAGE=node:20-bookworm-slim

FROM ${NODE_IMAGE} AS build
WORKDIR /src
COPY package.json package-lock.json tsconfig.base.json ./
COPY scripts/release.mjs scripts/
COPY packages/core/package.json packages/core/
COPY packages/redis/package.json packages/redis/
COPY packages/rules/package.json packages/rules/
COPY packages/server/package.json packages/server/
RUN npm ci --no-audit --no-fund --ignore-scripts --include-workspace-root \
      -w packages/core -w packages/redis -w packages/rules -w packages/server
COPY LICENSE ./
COPY packages/core packages/core
COPY packages/redis packages/redis
COPY packages/rules packages/rules
COPY packages/server packages/server
RUN node node_modules/typescript/bin/tsc -b packages/server/tsconfig.build.json \
 && mkdir /pack \
 && npm pack --silent --pack-destination /pack \
      -w packages/core -w packages/redis -w packages/rules -w packages/server
WORKDIR /app
RUN echo '{"private":true}' > package.json \
 && npm install --omit=dev --no-audit --no-fund --no-package-lock --ignore-scripts /pack/*.tgz \
 && rm package.json \
 && rm -rf /root/.npm

FROM ${NODE_IMAGE}
ENV NODE_ENV=production \
    SLUICE_HOST=0.0.0.0 \
    SLUICE_PORT=8080 \
    SLUICE_GRPC_PORT=8081 \
    SLUICE_RULES=/etc/sluice/rules.yaml \
    SLUICE_RULES_DIR=/var/lib/sluice/rules
COPY --from=build /app/node_modules /app/node_modules
COPY --from=build /app/node_modules/@sluice/server/examples/rules.yaml /etc/sluice/rules.yaml
# The one place the service writes: the versioned rule store on the embedded store. With a
# read-only root file system, mount a volume here (the Helm chart mounts an emptyDir); with
# Redis nothing is written.
RUN mkdir -p /var/lib/sluice/rules && chown -R 1000:1000 /var/lib/sluice
# A numeric user, so Kubernetes' runAsNonRoot can verify it (uid 1000 is `node` in node images).
USER 1000:1000
WORKDIR /var/lib/sluice
EXPOSE 8080 8081
STOPSIGNAL SIGTERM
ENTRYPOINT ["node", "/app/node_modules/@sluice/server/bin/sluice.js"]
CMD ["serve"]
