package main

// A process's retained output (docs/protocol.md §5.3): the newest chunks, up to
// retainedOutputLimit bytes of output and retainedChunkLimit chunks, whatever their sizes, for
// process/read. The bytes of every chunk sit back to back in one buffer and each chunk costs a
// small fixed record beside them, so a megabyte of one-byte chunks takes about as much memory
// as a megabyte in large ones.
//
//	chunks  [seq off n stream] [seq off n stream] …      oldest first, 24 bytes each
//	data    |dead|chunk bytes…                     |     chunk i at data[off-base:][:n]
//
// Eviction drops whole chunks from the front; the dead prefix of data is reclaimed by one
// copy once it outgrows what is live.

// retainedChunkLimit bounds the chunks retained per process, as the reference does.
const retainedChunkLimit = 50_000

// retainedCompactMin is the dead prefix of the buffer below which it is never compacted.
const retainedCompactMin = 64 << 10

// retainedChunk is one retained output chunk.
type retainedChunk struct {
	seq    uint64
	off    int // absolute offset of its bytes (see retainedOutput.base)
	n      int32
	stream streamKind
}

// retainedOutput is the retained chunks and their bytes. Its owner serialises access.
type retainedOutput struct {
	chunks []retainedChunk
	data   []byte
	base   int // the absolute offset of data[0]
	bytes  int // output bytes retained
}

// add retains a chunk, then evicts the oldest ones past the limits (never the newest).
func (r *retainedOutput) add(seq uint64, stream streamKind, b []byte) {
	r.chunks = append(r.chunks, retainedChunk{seq: seq, off: r.base + len(r.data), n: int32(len(b)), stream: stream})
	r.data = append(r.data, b...)
	r.bytes += len(b)
	drop := 0
	for r.bytes > retainedOutputLimit || len(r.chunks)-drop > retainedChunkLimit {
		if len(r.chunks)-drop == 1 {
			break
		}
		r.bytes -= int(r.chunks[drop].n)
		drop++
	}
	if drop == 0 {
		return
	}
	r.chunks = r.chunks[drop:]
	if dead := r.chunks[0].off - r.base; dead >= retainedCompactMin && dead > len(r.data)-dead {
		r.data = r.data[:copy(r.data, r.data[dead:])]
		r.base += dead
	}
}

// bytesOf is the output of chunk c.
func (r *retainedOutput) bytesOf(c *retainedChunk) []byte {
	start := c.off - r.base
	return r.data[start : start+int(c.n)]
}
