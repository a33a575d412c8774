# syntax=docker/dockerfile:1
# Build: compile TypeScript with the dev dependencies, then copy only what runs into a slim image.
FROM node:20-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
# npm ci's prepare script applies patches/ (the postgres driver's reset fix) with patch-package.
COPY patches ./patches
RUN npm ci --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY src ./src
RUN npm run build

FROM node:20-bookworm-slim AS production-dependencies
WORKDIR /app
COPY package.json package-lock.json ./
# --omit=optional leaves out embedded mode's PostgreSQL binaries: an image runs on DATABASE_URL.
# patch-package is a dev dependency, so scripts are skipped here and the driver patched in the build
# stage is copied over (same version: both come from package-lock.json).
RUN npm ci --omit=dev --omit=optional --ignore-scripts --no-audit --no-fund
COPY --from=build /app/node_modules/postgres ./node_modules/postgres

FROM node:20-bookworm-slim
ENV NODE_ENV=production \
    PORT=3000 \
    HOST=0.0.0.0 \
    HOOKLEDGER_CONFIG=/etc/hookledger/hookledger.config.json
WORKDIR /app
COPY --from=production-dependencies /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
COPY package.json ./
COPY bin ./bin
COPY migrations ./migrations
# The config names its secrets as env:NAME; mount your own file over this one.
COPY hookledger.config.json /etc/hookledger/hookledger.config.json
USER node
EXPOSE 3000
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 \
  CMD node -e "fetch('http://127.0.0.1:'+(process.env.PORT||3000)+'/healthz').then(r=>process.exit(r.ok?0:1),()=>process.exit(1))"
# `serve` applies pending migrations under an advisory lock before it listens, so replicas may start together.
ENTRYPOINT ["node", "--", "bin/hookledger.js"]
CMD ["serve", "--role", "all"]
