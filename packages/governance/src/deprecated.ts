/**
 * Names of 0.1, when partition ownership was called a lease (a word Sluice keeps for a batch of
 * permits taken ahead). Each is the renamed thing itself; use the new names.
 */
import { MemoryOwnershipStore, type MemoryOwnershipStoreOptions, type OwnershipStore } from './ownership/store.js';
import { RedisOwnershipStore, type RedisOwnershipStoreOptions } from './ownership/redis-store.js';

/** @deprecated Use {@link OwnershipStore}. */
export type LeaseStore = OwnershipStore;
/** @deprecated Use {@link MemoryOwnershipStore}. */
export const MemoryLeaseStore = MemoryOwnershipStore;
/** @deprecated Use {@link MemoryOwnershipStore}. */
export type MemoryLeaseStore = MemoryOwnershipStore;
/** @deprecated Use {@link MemoryOwnershipStoreOptions}. */
export type MemoryLeaseStoreOptions = MemoryOwnershipStoreOptions;
/** @deprecated Use {@link RedisOwnershipStore}. */
export const RedisLeaseStore = RedisOwnershipStore;
/** @deprecated Use {@link RedisOwnershipStore}. */
export type RedisLeaseStore = RedisOwnershipStore;
/** @deprecated Use {@link RedisOwnershipStoreOptions}. */
export type RedisLeaseStoreOptions = RedisOwnershipStoreOptions;
