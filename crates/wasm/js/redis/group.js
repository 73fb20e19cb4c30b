// tollgate/redis: the requests for one key, merged (see ../redis.js).

/** The requests for one key (and tenant) and the Redis keys of their slots. */
export class Group {
  #suffixes;
  #keys;

  constructor(id, key, base, tenant, suffixes) {
    /** Names the group among the ones running (and the deny cache's entry). */
    this.id = id;
    this.key = key;
    /** `<prefix>:{<namespace>:<key>}`. */
    this.base = base;
    /** The tenant, for a fair share's tenant window (else undefined). */
    this.tenant = tenant;
    this.#suffixes = suffixes;
  }

  /** Each slot's Redis key, the base and the slot's suffix (made when first asked: the module needs only the base). */
  get keys() {
    return (this.#keys ??= this.#suffixes.map((s) => this.base + s));
  }
}
