/**
 * Determinism of the workflow helper: a history recorded from the real server (by
 * workflow.test.ts with SLUICE_RECORD_HISTORY set) replays against the workflow code, and fails
 * to replay against code that issues different commands. Needs no server.
 */
import { describe, expect, it } from 'vitest';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { temporal } from '@temporalio/proto';
import { Worker, bundleWorkflowCode } from '@temporalio/worker';
import { bundleWorkflows, WORKFLOW_INTERCEPTORS } from './helpers.js';

const recorded = temporal.api.history.v1.History.decode(readFileSync(new URL('./fixtures/helper-history.bin', import.meta.url)));
const silent = { log() {}, info() {}, warn() {}, error() {}, debug() {}, trace() {} };

describe('replaying a recorded acquirePermit history', () => {
  it('the recorded history holds asks (local activity markers) and durable sleeps (timers)', () => {
    const events = recorded.events ?? [];
    expect(events.filter((e) => e.markerRecordedEventAttributes).length).toBeGreaterThan(4);
    expect(events.filter((e) => e.timerStartedEventAttributes).length).toBeGreaterThan(0);
  });

  it('replays without a determinism violation', async () => {
    await expect(Worker.runReplayHistory({ workflowBundle: await bundleWorkflows() }, recorded)).resolves.toBeUndefined();
  });

  it('fails against workflow code that changed its commands', async () => {
    const changed = await bundleWorkflowCode({
      workflowsPath: fileURLToPath(new URL('./fixtures/workflows-changed.js', import.meta.url)),
      workflowInterceptorModules: [WORKFLOW_INTERCEPTORS],
      logger: silent,
    });
    await expect(Worker.runReplayHistory({ workflowBundle: changed }, recorded)).rejects.toThrow(/[Nn]ondetermin|[Dd]eterminism/);
  });
});
