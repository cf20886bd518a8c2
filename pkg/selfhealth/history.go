package selfhealth

import "sort"

// stretch is a time in which the exporter was starved, in nanoseconds
// after the monitor's base: from the tick before a late wake to that wake
// (the starvation may have begun anywhere after the tick before); delay is
// the longest the monitor estimated that starvation held up a goroutine
// with work in it (see stretchDelay), over every tick merged into it.
type stretch struct{ from, to, delay int64 }

// history holds the recent starved stretches, oldest first, in a ring of
// bounded size: a stretch that begins within margin of the previous one's
// end is merged into it (no verdict can tell them apart, see starved), so
// that a starvation that goes on is one stretch however long it lasts.
type history struct {
	ring []stretch
	head int
	n    int
	// forgotten is the end of the newest stretch the ring dropped to make
	// room: a window that reaches back to it is answered as starved, since
	// what came before it is no longer known.
	forgotten int64
	// lost: the ring has dropped a stretch.
	lost bool
}

func newHistory(size int) *history { return &history{ring: make([]stretch, size)} }

func (h *history) at(i int) *stretch { return &h.ring[(h.head+i)%len(h.ring)] }

// add records the stretch [from, to] that delayed a goroutine by up to
// delay, to at or after every end recorded before, merging it into the
// newest stretch if it begins within margin of that one's end.
func (h *history) add(from, to, delay, margin int64) {
	if h.n > 0 {
		if last := h.at(h.n - 1); from <= last.to+margin {
			last.to, last.delay = max(last.to, to), max(last.delay, delay)
			return
		}
	}
	if h.n == len(h.ring) {
		h.forgotten, h.lost = h.at(0).to, true
		h.head = (h.head + 1) % len(h.ring)
		h.n--
	}
	h.n++
	*h.at(h.n - 1) = stretch{from, to, delay}
}

// starved judges a verdict concluded at `at` on a write sent at `sent`
// (sent <= at, nanoseconds after the base): whether a starved stretch
// could have moved it. The exporter, starved, stamps late what arrives
// while it waits, and once it runs again it stamps what waited within a
// margin (else its next tick is late too, and that is another stretch); a
// request it was about to send leaves late too. So a stretch matters if,
// with margin added to its end, it overlaps the start of the window,
// [sent, min(at, sent+margin)], or covers the verdict instant at itself.
// A stretch in the middle of a long window, over before the window's last
// margin, moved nothing: what arrived in it was stamped as soon as it
// ended, long before at, so an event stamped at at arrived then.
func (h *history) starved(sent, at, margin int64) bool {
	if h.lost && h.forgotten+margin >= sent {
		return true
	}
	// The first stretch whose end (plus margin) reaches the send.
	i := sort.Search(h.n, func(i int) bool { return h.at(i).to+margin >= sent })
	if i < h.n && h.at(i).from <= min(at, sent+margin) {
		return true
	}
	// The last stretch that begins at or before the verdict.
	j := sort.Search(h.n, func(i int) bool { return h.at(i).from > at }) - 1
	return j >= 0 && h.at(j).to+margin >= at
}

// resumed is the instant by which the exporter has stamped whatever
// arrived for it before at (nanoseconds after the base), as far as
// starvation goes: at itself if no starved stretch covers at or ends
// within margin before it. Otherwise starvation can only have delayed the
// stamps, never dropped them: by the end of the stretch, or by the longest
// delay seen in it if the stretch goes on longer than that, and a margin
// to catch up. A stretch that still goes on may move the answer later, so
// it is final once the monitor has covered it. A loss waits for it: an
// event that was delivered before at has been stamped by then, however
// starved the exporter was at at.
func (h *history) resumed(at, margin int64) int64 {
	if h.lost && h.forgotten+margin >= at {
		// What came before the oldest stretch kept is not known: the most
		// that a starvation that is over by the forgotten end can delay.
		return max(at, h.forgotten+margin)
	}
	j := sort.Search(h.n, func(i int) bool { return h.at(i).from > at }) - 1
	if j < 0 || h.at(j).to+margin < at {
		return at
	}
	s := h.at(j)
	return min(s.to, at+s.delay) + margin
}
