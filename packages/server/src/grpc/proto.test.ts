import { describe, expect, it } from 'vitest';
import { loadOutcomesDefinition, loadRlqsDefinition, loadRlsDefinition } from '../../test/proto.js';
import { OUTCOMES_PATH, RLQS_PATH, RLS_PATH } from './proto.js';

describe('the .proto files in PROTO_DIR', () => {
  it('load with @grpc/proto-loader and define the methods RLS_PATH, RLQS_PATH and OUTCOMES_PATH name', () => {
    expect(loadRlsDefinition().ShouldRateLimit?.path).toBe(RLS_PATH);
    expect(loadOutcomesDefinition().Report?.path).toBe(OUTCOMES_PATH);
    const rlqs = loadRlqsDefinition().StreamRateLimitQuotas;
    expect(rlqs?.path).toBe(RLQS_PATH);
    expect([rlqs?.requestStream, rlqs?.responseStream]).toEqual([true, true]);
  });
});
