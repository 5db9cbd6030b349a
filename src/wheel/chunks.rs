//! A vector stored in fixed-size chunks, so that growing never moves what it holds.
//!
//! A plain `Vec` doubles by copying everything into a new allocation: at millions of timers
//! that is hundreds of megabytes copied (and as much again faulted in) while the worker
//! thread stands still, a pause of a good fraction of a second, with twice the memory held
//! meanwhile. Here only the first chunk grows like a `Vec` (so a small wheel stays small);
//! every later chunk is allocated once at full size and never moves.

use std::ops::{Index, IndexMut};

const CHUNK_BITS: u32 = 16;
/// Entries per chunk.
const CHUNK: usize = 1 << CHUNK_BITS;
const OFFSET_MASK: usize = CHUNK - 1;

#[derive(Debug)]
pub(crate) struct Chunks<E> {
    chunks: Vec<Vec<E>>,
    len: usize,
}

impl<E> Chunks<E> {
    /// Room for `capacity` entries in the first chunk (at most one chunk's worth).
    pub(crate) fn with_capacity(capacity: usize) -> Self {
        Chunks {
            chunks: vec![Vec::with_capacity(capacity.min(CHUNK))],
            len: 0,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn push(&mut self, entry: E) {
        if self.len > 0 && self.len & OFFSET_MASK == 0 {
            self.chunks.push(Vec::with_capacity(CHUNK));
        }
        self.chunks
            .last_mut()
            .expect("there is always a chunk")
            .push(entry);
        self.len += 1;
    }

    pub(crate) fn get(&self, index: usize) -> Option<&E> {
        self.chunks
            .get(index >> CHUNK_BITS)?
            .get(index & OFFSET_MASK)
    }

    pub(crate) fn get_mut(&mut self, index: usize) -> Option<&mut E> {
        self.chunks
            .get_mut(index >> CHUNK_BITS)?
            .get_mut(index & OFFSET_MASK)
    }

    /// The entries from `start` on, in order.
    pub(crate) fn iter_from(&self, start: usize) -> impl Iterator<Item = &E> {
        let first_chunk = start >> CHUNK_BITS;
        self.chunks
            .iter()
            .enumerate()
            .skip(first_chunk)
            .flat_map(move |(number, chunk)| {
                let from = if number == first_chunk {
                    (start & OFFSET_MASK).min(chunk.len())
                } else {
                    0
                };
                chunk[from..].iter()
            })
    }
}

impl<E> Index<usize> for Chunks<E> {
    type Output = E;
    fn index(&self, index: usize) -> &E {
        &self.chunks[index >> CHUNK_BITS][index & OFFSET_MASK]
    }
}

impl<E> IndexMut<usize> for Chunks<E> {
    fn index_mut(&mut self, index: usize) -> &mut E {
        &mut self.chunks[index >> CHUNK_BITS][index & OFFSET_MASK]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indexes_and_iterates_across_chunk_boundaries_without_moving_entries() {
        let count = 2 * CHUNK + 5;
        let mut chunks = Chunks::with_capacity(4);
        for value in 0..count {
            chunks.push(value);
        }
        let second_chunk_start: *const usize = &chunks[CHUNK];
        chunks.push(count);
        assert!(
            std::ptr::eq(second_chunk_start, &chunks[CHUNK]),
            "entries never move"
        );
        assert_eq!(chunks.len(), count + 1);
        assert_eq!(chunks[CHUNK - 1], CHUNK - 1);
        assert_eq!(chunks.get(2 * CHUNK + 2), Some(&(2 * CHUNK + 2)));
        assert_eq!(chunks.get(count + 1), None);
        *chunks.get_mut(7).unwrap() = 70;
        assert_eq!(chunks[7], 70);
        let tail: Vec<usize> = chunks.iter_from(CHUNK - 2).take(4).copied().collect();
        assert_eq!(tail, [CHUNK - 2, CHUNK - 1, CHUNK, CHUNK + 1]);
        assert_eq!(chunks.iter_from(count - 1).count(), 2);
        assert_eq!(chunks.iter_from(count + 10).count(), 0);
    }
}
