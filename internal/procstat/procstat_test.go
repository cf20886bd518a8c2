package procstat

import (
	"os"
	"testing"
)

// This process's own sample: memory that adds up, and CPU it has spent.
func TestReadSelf(t *testing.T) {
	buf := make([]byte, 8<<20)
	for i := range buf {
		buf[i] = byte(i)
	}
	// Spend CPU until the kernel's clock ticks (10 ms) show some.
	var s Sample
	for sum, i := 0, 0; s.CPU == 0 && i < 1e4; i++ {
		for j := range 1 << 16 {
			sum += j * i
		}
		var err error
		if s, err = Read(os.Getpid()); err != nil {
			t.Fatal(err)
		}
		buf[i%len(buf)] = byte(sum)
	}
	if s.Anon < int64(len(buf)) || s.File <= 0 || s.RSS < s.Anon+s.File || s.Peak < s.RSS || s.CPU <= 0 {
		t.Errorf("%+v: want anonymous memory over the 8 MiB just written, file-backed pages, RSS at least their sum, a peak at least RSS, and some CPU", s)
	}
	if _, err := Read(-1); err == nil {
		t.Error("pid -1: no error")
	}
	_ = buf[len(buf)-1]
}
