package testenv

import (
	"fmt"
	"io"
	"net/http"
	"time"
)

// Metrics GETs http://addr/metrics, the endpoint every component serves, and returns the body;
// an error for a status other than 200 (with the body, which says why) or a server that does
// not answer within 5 s.
func Metrics(addr string) ([]byte, error) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("reading /metrics: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %s: %s", resp.Status, body)
	}
	return body, nil
}
