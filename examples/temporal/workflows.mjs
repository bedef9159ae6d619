// Workflow code of the sample fleet. It runs in Temporal's sandbox: it imports only
// @temporalio/workflow and the workflow entry of @sluice/temporal (no Node, no Redis).
import { proxyActivities } from '@temporalio/workflow';
import { withSluiceContext } from '@sluice/temporal/workflow';

const { chargeCard, refundCard } = proxyActivities({
  startToCloseTimeout: '60s',
  heartbeatTimeout: '10s',
  // No maximumAttempts: limited attempts are retried after their retry-after, and the
  // workflow's own deadline (schedule-to-close) is the bound.
  retry: { initialInterval: '1s', backoffCoefficient: 2, maximumInterval: '30s' },
  scheduleToCloseTimeout: '10m',
});

/** Charges `count` orders, `parallel` at a time; core business: it keeps the reserved share. */
export async function chargeOrders({ count, parallel }) {
  return withSluiceContext({ priority: 'core' }, () => lanes(count, parallel, (i) => chargeCard(`order-${i}`)));
}

/** Refunds `count` orders; normal priority, shed first when the provider is saturated. */
export async function refundOrders({ count, parallel }) {
  return lanes(count, parallel, (i) => refundCard(`refund-${i}`));
}

async function lanes(count, parallel, call) {
  let next = 0;
  let done = 0;
  async function lane() {
    while (next < count) {
      await call(next++);
      done++;
    }
  }
  await Promise.all(Array.from({ length: Math.min(parallel, count) }, lane));
  return done;
}
