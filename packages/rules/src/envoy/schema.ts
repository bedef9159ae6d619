import { z } from 'zod';

/**
 * The time units envoyproxy/ratelimit accepts (its `RateLimitUnit` enum without UNKNOWN), with
 * the window each stands for, as its `UnitToDivider` (src/utils/utilities.go) defines them: a
 * month is 30 days and a year 365.
 */
export const ENVOY_UNITS = Object.freeze({
  second: 1000,
  minute: 60_000,
  hour: 3_600_000,
  day: 86_400_000,
  week: 7 * 86_400_000,
  month: 30 * 86_400_000,
  year: 365 * 86_400_000,
});

/** One of {@link ENVOY_UNITS}, lower case (files may write them in any case, as envoy allows). */
export type EnvoyUnit = keyof typeof ENVOY_UNITS;

/** A `rate_limit` block as written in an envoy file (YAML nulls read as absent, as in Go). */
export interface EnvoyRateLimitInput {
  unit?: string | null | undefined;
  requests_per_unit?: number | null | undefined;
  unlimited?: boolean | null | undefined;
  name?: string | null | undefined;
  replaces?: { name?: string | null | undefined }[] | null | undefined;
}

/** A descriptor as written in an envoy file. */
export interface EnvoyDescriptorInput {
  key?: string | null | undefined;
  value?: string | null | undefined;
  rate_limit?: EnvoyRateLimitInput | null | undefined;
  descriptors?: EnvoyDescriptorInput[] | null | undefined;
  shadow_mode?: boolean | null | undefined;
  quota_mode?: boolean | null | undefined;
  detailed_metric?: boolean | null | undefined;
  value_to_metric?: boolean | null | undefined;
  share_threshold?: boolean | null | undefined;
  metadata?: Record<string, unknown> | null | undefined;
}

const flag = z.boolean().nullish();

const rateLimit = z.strictObject({
  unit: z.string().nullish(),
  requests_per_unit: z.number().nullish(),
  unlimited: flag,
  name: z.string().nullish(),
  replaces: z.array(z.strictObject({ name: z.string().nullish() })).nullish(),
});

// Every key envoy's `validKeys` (src/config/config_impl.go) knows is accepted, each only where
// envoy reads it; `key` is checked for emptiness later, with envoy's wording.
const descriptor: z.ZodType<EnvoyDescriptorInput> = z.lazy(() =>
  z.strictObject({
    key: z.string().nullish(),
    value: z.string().nullish(),
    rate_limit: rateLimit.nullish(),
    descriptors: z.array(descriptor).nullish(),
    shadow_mode: flag,
    quota_mode: flag,
    detailed_metric: flag,
    value_to_metric: flag,
    share_threshold: flag,
    metadata: z.record(z.string(), z.json()).nullish(),
  }),
);

/** The top level of an envoy file, also the shape of each entry of a native file's `domains`. */
export const envoyDomainSchema = z.strictObject({
  domain: z.string(),
  descriptors: z.array(descriptor).nullish(),
});

/** An envoy file as written. */
export type EnvoyDomainInput = z.infer<typeof envoyDomainSchema>;
