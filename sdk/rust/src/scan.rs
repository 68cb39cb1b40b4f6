//! Finding marker bytes: eight bytes at a time (no per-byte branch), std only.

const LO: u64 = 0x0101_0101_0101_0101;
const HI: u64 = 0x8080_8080_8080_8080;

/// Up to four bytes to look for at once (repeat one to look for fewer).
#[derive(Clone, Copy, Debug)]
pub struct ByteSet {
    words: [u64; 4],
    table: [bool; 256],
}

impl ByteSet {
    pub fn new(bytes: [u8; 4]) -> Self {
        let mut table = [false; 256];
        for b in bytes {
            table[b as usize] = true;
        }
        ByteSet { words: bytes.map(|b| LO * b as u64), table }
    }

    /// The index of the first byte of `data` in the set.
    #[inline]
    pub fn find(&self, data: &[u8]) -> Option<usize> {
        let mut i = 0;
        let n = data.len();
        while i + 8 <= n {
            let w = u64::from_le_bytes(data[i..i + 8].try_into().unwrap());
            let mut hit = 0;
            for s in self.words {
                let x = w ^ s;
                hit |= x.wrapping_sub(LO) & !x & HI;
            }
            if hit != 0 {
                // the lowest flagged byte is exact (borrows only run upwards)
                return Some(i + (hit.trailing_zeros() / 8) as usize);
            }
            i += 8;
        }
        data[i..].iter().position(|&b| self.table[b as usize]).map(|p| i + p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_first_byte_of_the_set_at_every_position() {
        let set = ByteSet::new([b'\n', 0, 0x17, 0x11]);
        for len in 0..40 {
            for at in 0..len {
                let mut data = vec![b'x'; len];
                data[at] = 0x17;
                if at + 3 < len {
                    data[at + 3] = b'\n';
                }
                assert_eq!(set.find(&data), Some(at));
            }
            assert_eq!(set.find(&vec![0xffu8; len]), None);
        }
        // bytes just above a set byte (0x01 above 0x00, 0x12 above 0x11) are no hit
        assert_eq!(set.find(&[0x01, 0x12, 0x0b, 0x18, 0x81, 0x90, 0x91, 0x80, 0x11]), Some(8));
    }
}
