//! The shape of the request heads a tap read, counted as plain integers.

/// Buckets of [`HeadShapes`]: powers of two, the last open-ended.
pub const HEAD_BUCKETS: usize = 24;

/// The shape of the request heads a tap read: how many, their summed bytes and fields, and
/// both distributions in power-of-two buckets (`[i]` holds values up to 2^i). Plain
/// counters: recording is a few additions, no allocation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HeadShapes {
    pub count: u64,
    pub bytes: u64,
    pub fields: u64,
    pub bytes_buckets: [u64; HEAD_BUCKETS],
    pub fields_buckets: [u64; HEAD_BUCKETS],
}

impl HeadShapes {
    #[inline]
    pub fn record(&mut self, bytes: usize, fields: usize) {
        self.count += 1;
        self.bytes += bytes as u64;
        self.fields += fields as u64;
        self.bytes_buckets[Self::bucket(bytes)] += 1;
        self.fields_buckets[Self::bucket(fields)] += 1;
    }

    /// The bucket of `n`: the smallest i with n ≤ 2^i, at most the last.
    #[inline]
    pub fn bucket(n: usize) -> usize {
        let i = if n <= 1 {
            0
        } else {
            (usize::BITS - (n - 1).leading_zeros()) as usize
        };
        i.min(HEAD_BUCKETS - 1)
    }

    pub fn add(&mut self, other: &HeadShapes) {
        self.count += other.count;
        self.bytes += other.bytes;
        self.fields += other.fields;
        for (a, b) in self.bytes_buckets.iter_mut().zip(&other.bytes_buckets) {
            *a += b;
        }
        for (a, b) in self.fields_buckets.iter_mut().zip(&other.fields_buckets) {
            *a += b;
        }
    }

    /// What was recorded since `earlier` (an older reading of the same counters).
    pub fn since(&self, earlier: &HeadShapes) -> HeadShapes {
        let mut out = *self;
        out.count = out.count.saturating_sub(earlier.count);
        out.bytes = out.bytes.saturating_sub(earlier.bytes);
        out.fields = out.fields.saturating_sub(earlier.fields);
        for (a, b) in out.bytes_buckets.iter_mut().zip(&earlier.bytes_buckets) {
            *a = a.saturating_sub(*b);
        }
        for (a, b) in out.fields_buckets.iter_mut().zip(&earlier.fields_buckets) {
            *a = a.saturating_sub(*b);
        }
        out
    }
}
