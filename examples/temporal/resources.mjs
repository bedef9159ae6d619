// The limits the whole sample fleet shares (every worker process loads the same).
export const LIMIT_PER_SECOND = 20;
export const BURST = 5;

export const resources = {
  'api:payment_provider': {
    limits: { algorithm: 'token-bucket', limit: LIMIT_PER_SECOND, windowMs: 1000, burst: BURST },
    // A quarter of the provider's quota is kept for core business (charges); refunds are shed first.
    priority: { coreShare: 0.25 },
  },
};

// The non-blocking scenario (non-blocking.mjs): one quota of 10 calls a second, every call in
// non-blocking mode.
export const QUOTA_PER_SECOND = 10;
export const QUOTA_BURST = 5;

export const quotaResources = {
  'api:quota': { algorithm: 'token-bucket', limit: QUOTA_PER_SECOND, windowMs: 1000, burst: QUOTA_BURST },
};
