/**
 * A read-through cache for small records that hot request paths read from the database on every
 * request (an API key, an aggregator's registration): each value is used for at most `maxAgeMs`
 * after its read began, read again in the background once it is a quarter that old (so a steady
 * caller waits for a read only when one takes longer than three quarters of `maxAgeMs`), and read
 * once per key at a time (requests arriving meanwhile share the read). Storage is lru-cache (the
 * least recently used key goes first past `max`).
 */
import { LRUCache } from 'lru-cache';

export interface ReadCacheOptions<V> {
  /** Reads the value of `key` (`held`: the value held, however old, e.g. to ask only for changes); undefined when there is none. */
  read: (key: string, held: V | undefined) => Promise<V | undefined>;
  /** The longest a value is used after its read began, in ms; 0 reads on every call. */
  maxAgeMs: number;
  /** Keys remembered at most. */
  max: number;
  /** Whether a value read may be reused (e.g. not a refusal); default every value. */
  keep?: (value: V) => boolean;
}

export class ReadCache<V extends object> {
  readonly #options: ReadCacheOptions<V>;
  readonly #held: LRUCache<string, { value: V; readAt: number }>;
  readonly #reads = new Map<string, Promise<V | undefined>>();

  constructor(options: ReadCacheOptions<V>) {
    this.#options = options;
    this.#held = new LRUCache({ max: options.max });
  }

  /**
   * The value of `key`: the held one when read less than `maxAgeMs` ago, starting a background
   * read past a quarter of `maxAgeMs` or when it was read before `changedSince` (a
   * `performance.now()` time, e.g. of a change this process made, so the change shows within one
   * read without any caller waiting for it); else the answer of a read (shared with the calls
   * meanwhile).
   * @throws what `read` throws, to the calls that wait for that read.
   */
  get(key: string, changedSince = -Infinity): V | Promise<V | undefined> {
    const held = this.#held.get(key);
    const age = held ? performance.now() - held.readAt : Infinity;
    if (!held || age >= this.#options.maxAgeMs) return this.#read(key);
    // A failed background read is not this call's: the next call that waits for a read gets it.
    if ((age >= this.#options.maxAgeMs / 4 || held.readAt <= changedSince) && !this.#reads.has(key)) this.#read(key).catch(() => undefined);
    return held.value;
  }

  #read(key: string): Promise<V | undefined> {
    let read = this.#reads.get(key);
    if (!read) {
      const readAt = performance.now();
      read = this.#options.read(key, this.#held.get(key)?.value).then((value) => {
        if (value !== undefined && (this.#options.keep?.(value) ?? true)) this.#held.set(key, { value, readAt });
        else this.#held.delete(key);
        return value;
      }).finally(() => this.#reads.delete(key));
      this.#reads.set(key, read);
    }
    return read;
  }
}
