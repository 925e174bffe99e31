//! Retry backoff: `base * 2^attempt + uniform(0, base)`, capped; randomness injected.
