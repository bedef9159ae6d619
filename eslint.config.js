import js from '@eslint/js';
import { createTypeScriptImportResolver } from 'eslint-import-resolver-typescript';
import importX from 'eslint-plugin-import-x';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  { ignores: ['**/dist/**', '**/node_modules/**', '.run/**', '.tools/**', 'coverage/**'] },
  js.configs.recommended,
  ...tseslint.configs.recommendedTypeChecked,
  {
    languageOptions: {
      parserOptions: {
        projectService: {
          allowDefaultProject: ['*.js', 'scripts/*.mjs', 'examples/*/*.mjs', 'test/integration/fixtures/*.mjs'],
          // The examples, scripts and fixtures outgrew the default of 8; they are few and small.
          maximumDefaultProjectFileMatchCount_THIS_WILL_SLOW_DOWN_LINTING: 32,
        },
        tsconfigRootDir: import.meta.dirname,
      },
    },
    rules: {
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-misused-promises': 'error',
      '@typescript-eslint/no-non-null-assertion': 'off',
      // Async functions are used on purpose to turn synchronous throws into rejections.
      '@typescript-eslint/require-await': 'off',
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
    },
  },
  {
    // The packages' shape: no import cycles, and another package only through its exports.
    files: ['packages/*/src/**/*.ts'],
    plugins: { 'import-x': importX },
    settings: {
      'import-x/resolver-next': [createTypeScriptImportResolver({ alwaysTryTypes: true })],
      'import-x/parsers': { '@typescript-eslint/parser': ['.ts'] },
      'import-x/extensions': ['.ts', '.js'],
    },
    rules: {
      'import-x/no-cycle': 'error',
      'import-x/no-relative-packages': 'error',
      'no-restricted-imports': [
        'error',
        {
          patterns: [
            {
              group: ['@sluice/*/src/*', '@sluice/*/dist/*', '@sluice/*/lua/*', '@sluice/*/test/*'],
              message: 'import another package through its exports',
            },
          ],
        },
      ],
    },
  },
  {
    // The server's layers: the service and what it is built from (auth, bounds, clients, envoy,
    // rollout, ...) know no transport; each transport (http/, grpc/) knows the service, never
    // the other transport. Only the entry points (serve.ts, index.ts, cli/) wire them together.
    files: ['packages/server/src/**/*.ts'],
    ignores: ['**/*.test.ts'],
    plugins: { 'import-x': importX },
    rules: {
      'import-x/no-restricted-paths': [
        'error',
        {
          zones: [
            {
              target: ['packages/server/src/!(http|grpc|cli)/**', 'packages/server/src/!(serve|index|cli).ts'],
              from: ['packages/server/src/http', 'packages/server/src/grpc'],
              message: 'the service layer knows no transport: move what both transports need out of http/ and grpc/',
            },
            {
              target: 'packages/server/src/grpc',
              from: 'packages/server/src/http',
              message: 'a transport imports the service layer, never another transport',
            },
            {
              target: 'packages/server/src/http',
              from: 'packages/server/src/grpc',
              message: 'a transport imports the service layer, never another transport',
            },
          ],
        },
      ],
    },
  },
  {
    files: ['**/*.test.ts', 'test/**/*.ts'],
    rules: {
      '@typescript-eslint/no-unsafe-assignment': 'off',
      '@typescript-eslint/no-unsafe-member-access': 'off',
    },
  },
  {
    files: ['**/*.js', '**/*.mjs'],
    ...tseslint.configs.disableTypeChecked,
    languageOptions: {
      globals: {
        process: 'readonly',
        console: 'readonly',
        setTimeout: 'readonly',
        clearTimeout: 'readonly',
        setInterval: 'readonly',
        clearInterval: 'readonly',
      },
    },
  },
);
