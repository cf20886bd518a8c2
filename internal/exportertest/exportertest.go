// Package exportertest runs the exporter binary and reads what it serves
// and reports: the helpers shared by the tests that drive the exporter from
// outside and by hack/bench. They return errors rather than fail a test, so that the
// bench, which is no test, can use them too.
package exportertest

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Build builds the exporter from the working tree into dir and returns the
// binary's path.
func Build(dir string) (string, error) {
	bin := filepath.Join(dir, "watchprobe")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/watchprobe/watchprobe/cmd/exporter").CombinedOutput(); err != nil {
		return "", fmt.Errorf("building the exporter: %v\n%s", err, out)
	}
	return bin, nil
}

// FreeAddr is a loopback address that nothing listened on a moment ago.
func FreeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// Process is a running exporter binary, serving at URL.
type Process struct {
	URL  string
	Cmd  *exec.Cmd
	done chan struct{}
}

// Start runs the exporter binary bin with args, serving on a free loopback
// address, with env added to this process's environment and its log
// written to stderr.
func Start(bin string, env []string, stderr io.Writer, args ...string) (*Process, error) {
	addr, err := FreeAddr()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, append([]string{"--web.listen-address", addr}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &Process{URL: "http://" + addr, Cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	return p, nil
}

// Done is closed once the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Signal sends sig and waits up to within for the process to exit.
func (p *Process) Signal(sig os.Signal, within time.Duration) error {
	if err := p.Cmd.Process.Signal(sig); err != nil {
		return err
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(within):
		return fmt.Errorf("the exporter did not exit within %s of %s", within, sig)
	}
}

// Stop interrupts the process, as Ctrl-C would, so that it deletes its
// markers, and waits for it to exit.
func (p *Process) Stop() {
	_ = p.Cmd.Process.Signal(os.Interrupt)
	<-p.done
}

// Kill kills the process and waits for it to exit.
func (p *Process) Kill() {
	_ = p.Cmd.Process.Kill()
	<-p.done
}

// Get fetches path from the process, with the Accept header accept if not
// empty.
func (p *Process) Get(path, accept string) (code int, body string, err error) {
	return Get(p.URL+path, accept)
}

// Get fetches url, with the Accept header accept if not empty.
func Get(url, accept string) (code int, body string, err error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// Scrape reads and parses /metrics at url, the base URL of an exporter or
// of any server exposing /metrics.
func Scrape(url string) (map[string]*dto.MetricFamily, error) {
	code, body, err := Get(url+"/metrics", "")
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("%s/metrics: HTTP %d", url, code)
	}
	return Parse(body)
}

// Gather gathers g's metric families, by name, for Sum: a registry read
// the way a scrape of it would be.
func Gather(g prometheus.Gatherer) (map[string]*dto.MetricFamily, error) {
	list, err := g.Gather()
	families := make(map[string]*dto.MetricFamily, len(list))
	for _, f := range list {
		families[f.GetName()] = f
	}
	return families, err
}

// Parse parses a text exposition into its metric families, by name.
func Parse(exposition string) (map[string]*dto.MetricFamily, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	return parser.TextToMetricFamilies(strings.NewReader(exposition))
}

// Sum adds up the counter, gauge and untyped samples of family name whose
// labels include match (an empty value matches an absent label, as in
// PromQL), and says whether there was one.
func Sum(families map[string]*dto.MetricFamily, name string, match map[string]string) (sum float64, found bool) {
	for _, m := range matching(families, name, match) {
		found = true
		sum += m.GetCounter().GetValue() + m.GetGauge().GetValue() + m.GetUntyped().GetValue()
	}
	return sum, found
}

// HistogramSum adds up the sample counts and sums of histogram name's
// series whose labels include match, as Sum does.
func HistogramSum(families map[string]*dto.MetricFamily, name string, match map[string]string) (count, sum float64) {
	for _, m := range matching(families, name, match) {
		count += float64(m.GetHistogram().GetSampleCount())
		sum += m.GetHistogram().GetSampleSum()
	}
	return count, sum
}

// matching are family name's series whose labels include match.
func matching(families map[string]*dto.MetricFamily, name string, match map[string]string) []*dto.Metric {
	var out []*dto.Metric
next:
	for _, m := range families[name].GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		for k, v := range match {
			if labels[k] != v {
				continue next
			}
		}
		out = append(out, m)
	}
	return out
}

// WaitPathsUp waits until the process serves its metrics and every path
// of its probes has a stream open and caught up (watchprobe_path_up is 1
// on each): /-/ready is the exporter's own state, not its probes'.
func (p *Process) WaitPathsUp(within time.Duration) error {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		select {
		case <-p.done:
			return fmt.Errorf("the exporter exited before its paths were up")
		default:
		}
		if up, down := p.paths(); up > 0 && down == 0 {
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("the paths of the exporter at %s not all up within %s", p.URL, within)
}

// paths counts the paths that are up and those that are not, none if the
// metrics cannot be read.
func (p *Process) paths() (up, down int) {
	families, err := Scrape(p.URL)
	if err != nil {
		return 0, 0
	}
	for _, m := range families["watchprobe_path_up"].GetMetric() {
		if m.GetGauge().GetValue() == 1 {
			up++
		} else {
			down++
		}
	}
	return up, down
}

// ScrapeNative reads and parses /metrics at url in the protobuf format,
// which carries the native histograms that the text format leaves out.
func ScrapeNative(url string) (map[string]*dto.MetricFamily, error) {
	req, err := http.NewRequest(http.MethodGet, url+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", string(expfmt.NewFormat(expfmt.TypeProtoDelim)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s/metrics: HTTP %d", url, resp.StatusCode)
	}
	families := map[string]*dto.MetricFamily{}
	dec := expfmt.NewDecoder(resp.Body, expfmt.ResponseFormat(resp.Header))
	for {
		var mf dto.MetricFamily
		if err := dec.Decode(&mf); err != nil {
			if errors.Is(err, io.EOF) {
				return families, nil
			}
			return nil, err
		}
		families[mf.GetName()] = &mf
	}
}
