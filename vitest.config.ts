import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';

// Tests import packages by name; point those names at the sources so tests need no build.
const alias = {
  '@sluice/core/metrics': fileURLToPath(new URL('./packages/core/src/metrics.ts', import.meta.url)),
  '@sluice/core': fileURLToPath(new URL('./packages/core/src/index.ts', import.meta.url)),
  '@sluice/redis/kit': fileURLToPath(new URL('./packages/redis/src/kit.ts', import.meta.url)),
  '@sluice/redis': fileURLToPath(new URL('./packages/redis/src/index.ts', import.meta.url)),
  '@sluice/server': fileURLToPath(new URL('./packages/server/src/index.ts', import.meta.url)),
  '@sluice/rules': fileURLToPath(new URL('./packages/rules/src/index.ts', import.meta.url)),
  '@sluice/client': fileURLToPath(new URL('./packages/client/src/index.ts', import.meta.url)),
  '@sluice/temporal': fileURLToPath(new URL('./packages/temporal/src/index.ts', import.meta.url)),
  '@sluice/stream': fileURLToPath(new URL('./packages/stream/src/index.ts', import.meta.url)),
  '@sluice/gateway': fileURLToPath(new URL('./packages/gateway/src/index.ts', import.meta.url)),
};

export default defineConfig({
  resolve: { alias },
  test: {
    projects: [
      {
        resolve: { alias },
        test: {
          name: 'unit',
          include: ['packages/*/src/**/*.test.ts', 'bench/src/**/*.test.ts', 'test/unit/**/*.test.ts'],
          // Unit tests run on a manual clock: time is never their subject, so a machine whose
          // cores are busy with other work must not fail them (some parse megabytes of text).
          testTimeout: 30_000,
        },
      },
      {
        resolve: { alias },
        test: {
          name: 'integration',
          include: ['packages/*/test/**/*.test.ts', 'test/integration/**/*.test.ts'],
          testTimeout: 60_000,
          hookTimeout: 60_000,
          // Integration files share real servers; running them one at a time keeps timing sane
          // on small machines.
          fileParallelism: false,
        },
      },
    ],
  },
});
