package libpod

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// Info is what the backend reads of the service's /info.
type Info struct {
	Host *HostInfo `json:"host"`
}

// HostInfo is define.HostInfo, in part.
type HostInfo struct {
	CgroupsVersion    string          `json:"cgroupVersion"`
	CgroupControllers []string        `json:"cgroupControllers"`
	IDMappings        IDMappings      `json:"idMappings"`
	OCIRuntime        *OCIRuntimeInfo `json:"ociRuntime"`
	Security          SecurityInfo    `json:"security"`
}

// IDMappings is the service's own user namespace's maps (a rootless
// service's).
type IDMappings struct {
	GIDMap []IDMap `json:"gidmap"`
	UIDMap []IDMap `json:"uidmap"`
}

// OCIRuntimeInfo names the service's default OCI runtime.
type OCIRuntimeInfo struct {
	Name string `json:"name"`
	Path string `json:"path"`
}

// SecurityInfo is define.SecurityInfo, in part.
type SecurityInfo struct {
	Rootless       bool `json:"rootless"`
	SECCOMPEnabled bool `json:"seccompEnabled"`
}

// Info asks the service about its host.
func (c *Client) Info(ctx context.Context) (*Info, error) {
	var i Info
	return &i, c.call(ctx, http.MethodGet, path("/info"), nil, nil, &i)
}

// ServerVersion is the service's version and API version, as the bindings'
// system.Version reports them.
type ServerVersion struct {
	Version, APIVersion string
}

// Version asks the service for its version.
func (c *Client) Version(ctx context.Context) (ServerVersion, error) {
	var v struct {
		Version    string
		APIVersion string `json:"ApiVersion"`
		Components []struct {
			Name    string
			Details map[string]string
		}
	}
	if err := c.call(ctx, http.MethodGet, path("/version"), nil, nil, &v); err != nil {
		return ServerVersion{}, err
	}
	sv := ServerVersion{Version: v.Version, APIVersion: v.APIVersion}
	for _, comp := range v.Components {
		if comp.Name == "Podman Engine" {
			sv.APIVersion = comp.Details["APIVersion"]
		}
	}
	return sv, nil
}

// exists asks an /exists endpoint: true on any success, false on any
// other answer, as the bindings' Exists functions.
func (c *Client) exists(ctx context.Context, p string) (bool, error) {
	resp, err := c.do(ctx, http.MethodGet, p, nil, nil)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode/100 == 2, nil
}

// ImageExists reports whether the service holds the image ref.
func (c *Client) ImageExists(ctx context.Context, ref string) (bool, error) {
	return c.exists(ctx, path("/images/%s/exists", ref))
}

// Image is what the backend reads of an image's inspection.
type Image struct {
	ID     string `json:"Id"`
	Config *struct {
		Env []string `json:"Env"`
	} `json:"Config"`
}

// ImageInspect inspects the image ref.
func (c *Client) ImageInspect(ctx context.Context, ref string) (*Image, error) {
	var i Image
	return &i, c.call(ctx, http.MethodGet, path("/images/%s/json", ref), nil, nil, &i)
}

// Pull pulls ref, writing the progress the service reports to progress,
// and returns the service's errors (joined as the bindings join them).
// The service pulls with its own registry credentials.
func (c *Client) Pull(ctx context.Context, ref string, progress io.Writer) error {
	if progress == nil {
		progress = io.Discard
	}
	resp, err := c.do(ctx, http.MethodPost, path("/images/pull"), url.Values{"reference": {ref}}, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return process(resp, nil)
	}
	dec := json.NewDecoder(resp.Body)
	var errs []error
	for {
		var r struct {
			Stream string   `json:"stream,omitempty"`
			Error  string   `json:"error,omitempty"`
			Images []string `json:"images,omitempty"`
			ID     string   `json:"id,omitempty"`
		}
		if err := dec.Decode(&r); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			errs = append(errs, fmt.Errorf("failed to decode message from stream: %w", err))
			break
		}
		switch {
		case r.Stream != "":
			fmt.Fprint(progress, r.Stream)
		case r.Error != "":
			errs = append(errs, errors.New(r.Error))
		case len(r.Images) > 0, r.ID != "":
		default:
			return fmt.Errorf("failed to parse pull results stream, unexpected input: %v", r)
		}
	}
	return joinErrors(errs)
}

// joinErrors joins errors as Podman's errorhandling.JoinErrors does.
func joinErrors(errs []error) error {
	switch len(errs) {
	case 0:
		return nil
	case 1:
		return errs[0]
	}
	points := make([]string, len(errs))
	for i, e := range errs {
		points[i] = "* " + e.Error()
	}
	return fmt.Errorf("%d errors occurred:\n\t%s", len(errs), strings.Join(points, "\n\t"))
}

// ContainerCreate creates a container and returns its id.
func (c *Client) ContainerCreate(ctx context.Context, s *SpecGenerator) (string, error) {
	var r struct {
		ID string `json:"Id"`
	}
	err := c.call(ctx, http.MethodPost, path("/containers/create"), nil, s, &r)
	return r.ID, err
}

// ContainerStart starts a created container.
func (c *Client) ContainerStart(ctx context.Context, id string) error {
	return c.call(ctx, http.MethodPost, path("/containers/%s/start", id), nil, nil, nil)
}

// ContainerKill sends the signal sig (a number or a name) to the
// container.
func (c *Client) ContainerKill(ctx context.Context, id, sig string) error {
	return c.call(ctx, http.MethodPost, path("/containers/%s/kill", id), url.Values{"signal": {sig}}, nil, nil)
}

// ContainerRemove removes the container, forced (stopping it with no
// grace period), with its anonymous volumes; no container is no error.
func (c *Client) ContainerRemove(ctx context.Context, id string) error {
	q := url.Values{"force": {"true"}, "ignore": {"true"}, "volumes": {"true"}, "timeout": {"0"}}
	return c.call(ctx, http.MethodDelete, path("/containers/%s", id), q, nil, nil)
}

// ContainerExists reports whether the service has the container (any
// other answer than a success is false).
func (c *Client) ContainerExists(ctx context.Context, id string) (bool, error) {
	return c.exists(ctx, path("/containers/%s/exists", id))
}

// ContainerWait waits until the container is in one of the states
// (stopped, exited, ...), the service looking every interval (a Go
// duration), and returns its exit code.
func (c *Client) ContainerWait(ctx context.Context, id string, states []string, interval string) (int32, error) {
	q := url.Values{"condition": states, "interval": {interval}}
	var code int32
	return code, c.call(ctx, http.MethodPost, path("/containers/%s/wait", id), q, nil, &code)
}

// Container is what the backend reads of a container's inspection.
type Container struct {
	ID    string `json:"Id"`
	State *struct {
		OOMKilled bool `json:"OOMKilled"`
		Pid       int  `json:"Pid"`
	} `json:"State"`
	Mounts []struct {
		Source      string `json:"Source"`
		Destination string `json:"Destination"`
	} `json:"Mounts"`
	HostConfig *struct {
		LogConfig *struct {
			Type string `json:"Type"`
			Path string `json:"Path"`
		} `json:"LogConfig"`
	} `json:"HostConfig"`
}

// ContainerInspect inspects the container.
func (c *Client) ContainerInspect(ctx context.Context, id string) (*Container, error) {
	var ct Container
	return &ct, c.call(ctx, http.MethodGet, path("/containers/%s/json", id), nil, nil, &ct)
}

// ListedContainer is a container as the service lists it.
type ListedContainer struct {
	ID     string `json:"Id"`
	Names  []string
	State  string
	Labels map[string]string
}

// ContainerList lists every container (running or not) that matches the
// filters (e.g. {"label": {"k=v"}}).
func (c *Client) ContainerList(ctx context.Context, filters map[string][]string) ([]ListedContainer, error) {
	q, err := filterQuery(filters)
	if err != nil {
		return nil, err
	}
	q.Set("all", "true")
	var out []ListedContainer
	return out, c.call(ctx, http.MethodGet, path("/containers/json"), q, nil, &out)
}

// filterQuery is the filters parameter: the map as JSON.
func filterQuery(filters map[string][]string) (url.Values, error) {
	q := url.Values{}
	if filters != nil {
		b, err := json.Marshal(filters)
		if err != nil {
			return nil, err
		}
		q.Set("filters", string(b))
	}
	return q, nil
}

// VolumeCreate is the body of a volume's creation (the fields of
// entities.VolumeCreateOptions the backend sets).
type VolumeCreate struct {
	Name    string
	Driver  string
	Labels  map[string]string
	Options map[string]string
}

// VolumeCreate creates a volume.
func (c *Client) VolumeCreate(ctx context.Context, v VolumeCreate) error {
	return c.call(ctx, http.MethodPost, path("/volumes/create"), nil, v, nil)
}

// VolumeRemove removes a volume, forced (with the containers that use
// it).
func (c *Client) VolumeRemove(ctx context.Context, name string) error {
	return c.call(ctx, http.MethodDelete, path("/volumes/%s", name), url.Values{"force": {"true"}}, nil, nil)
}

// ListedVolume is a volume as the service lists it.
type ListedVolume struct {
	Name   string
	Labels map[string]string
}

// VolumeList lists the volumes that match the filters.
func (c *Client) VolumeList(ctx context.Context, filters map[string][]string) ([]ListedVolume, error) {
	q, err := filterQuery(filters)
	if err != nil {
		return nil, err
	}
	var out []ListedVolume
	return out, c.call(ctx, http.MethodGet, path("/volumes/json"), q, nil, &out)
}

// Call sends method to p, a path under /vAPIVersion/libpod (its elements
// escaped), with query q and the JSON of in (if not nil), and decodes a
// successful answer into out (if not nil): for requests the backend's
// tests make.
func (c *Client) Call(ctx context.Context, method, p string, q url.Values, in, out any) error {
	return c.call(ctx, method, prefix+p, q, in, out)
}

// Raw sends method to p, as [Client.Call] does, with body (of
// contentType) if not nil, and returns the body of a successful answer as
// it is.
func (c *Client) Raw(ctx context.Context, method, p string, q url.Values, body io.Reader, contentType string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.base+prefix+p, body)
	if err != nil {
		return nil, err
	}
	req.URL.RawQuery = q.Encode()
	if body != nil {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		return nil, errorOf(resp, data)
	}
	return data, nil
}
