// Bundles the sample's workflows (with Sluice's workflow interceptors) into a temporary file for
// the workers to load; returns its path.
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { URL, fileURLToPath } from 'node:url';
import { bundleWorkflowCode } from '@temporalio/worker';

export async function bundleWorkflows(label) {
  const quiet = { log() {}, info() {}, warn() {}, error() {}, debug() {}, trace() {} };
  const { code } = await bundleWorkflowCode({
    workflowsPath: fileURLToPath(new URL('./workflows.mjs', import.meta.url)),
    workflowInterceptorModules: ['@sluice/temporal/workflow'],
    logger: quiet,
  });
  const path = join(mkdtempSync(join(tmpdir(), `sluice-${label}-`)), 'workflows.js');
  writeFileSync(path, code);
  return path;
}
