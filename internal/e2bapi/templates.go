package e2bapi

import "time"

// The template build API's wire types (E2B's OpenAPI document, and the
// JS SDK 2.51 `src/template/buildApi.ts` for what it sends).

// TemplateBuildRequestV3 is the body of POST /v3/templates.
type TemplateBuildRequestV3 struct {
	// Name is "name" or "name:tag".
	Name string `json:"name"`
	// Tags are more tags the build gets.
	Tags []string `json:"tags"`
	// Alias is the deprecated form of Name.
	Alias         string `json:"alias"`
	TeamID        string `json:"teamID"`
	CPUCount      *int32 `json:"cpuCount"`
	MemoryMB      *int32 `json:"memoryMB"`
	MinFreeDiskMB *int32 `json:"minFreeDiskMb"`
}

// TemplateRequestResponseV3 is POST /v3/templates' answer (202).
type TemplateRequestResponseV3 struct {
	TemplateID string   `json:"templateID"`
	BuildID    string   `json:"buildID"`
	Public     bool     `json:"public"`
	Names      []string `json:"names"`
	Tags       []string `json:"tags"`
	Aliases    []string `json:"aliases"`
}

// TemplateBuildFileUpload is GET /templates/{id}/files/{hash}'s answer
// (201): whether the archive is there, and where to PUT it if not.
type TemplateBuildFileUpload struct {
	Present bool              `json:"present"`
	URL     string            `json:"url,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`
}

// TemplateStep is one build step.
type TemplateStep struct {
	Type      string   `json:"type"`
	Args      []string `json:"args"`
	Force     bool     `json:"force"`
	FilesHash string   `json:"filesHash"`
	// The SDK sends its instruction objects whole; these are the client's.
	ForceUpload     *bool `json:"forceUpload"`
	ResolveSymlinks *bool `json:"resolveSymlinks"`
	Gzip            *bool `json:"gzip"`
}

// FromImageRegistry is how to authenticate to fromImage's registry.
type FromImageRegistry struct {
	Type     string `json:"type"` // registry, aws, gcp
	Username string `json:"username"`
	Password string `json:"password"`
	// AWS and GCP registries: accepted, refused at build (no such
	// registries are reachable from a self-hosted server's tests).
	AWSAccessKeyID     string `json:"awsAccessKeyId"`
	AWSSecretAccessKey string `json:"awsSecretAccessKey"`
	AWSRegion          string `json:"awsRegion"`
	ServiceAccountJSON string `json:"serviceAccountJson"`
}

// TemplateBuildStartV2 is the body of POST /v2/templates/{id}/builds/{buildID}.
type TemplateBuildStartV2 struct {
	FromImage         string             `json:"fromImage"`
	FromTemplate      string             `json:"fromTemplate"`
	FromImageRegistry *FromImageRegistry `json:"fromImageRegistry"`
	Force             bool               `json:"force"`
	Steps             []TemplateStep     `json:"steps"`
	StartCmd          string             `json:"startCmd"`
	ReadyCmd          string             `json:"readyCmd"`
}

// BuildLogEntry is one line of a build's log.
type BuildLogEntry struct {
	Timestamp time.Time `json:"timestamp"`
	Level     string    `json:"level"`
	Message   string    `json:"message"`
	Step      string    `json:"step,omitempty"`
}

// BuildStatusReason is why a build failed.
type BuildStatusReason struct {
	Message    string          `json:"message"`
	Step       string          `json:"step,omitempty"`
	LogEntries []BuildLogEntry `json:"logEntries"`
}

// TemplateBuildInfo is GET /templates/{id}/builds/{buildID}/status's answer.
type TemplateBuildInfo struct {
	TemplateID string             `json:"templateID"`
	BuildID    string             `json:"buildID"`
	Status     string             `json:"status"`
	LogEntries []BuildLogEntry    `json:"logEntries"`
	Logs       []string           `json:"logs"` // deprecated, always empty
	Reason     *BuildStatusReason `json:"reason,omitempty"`
}

// AssignTemplateTagsRequest is the body of POST /templates/tags.
type AssignTemplateTagsRequest struct {
	Target string   `json:"target"` // "name:tag" (or "name") of the build to tag
	Tags   []string `json:"tags"`
}

// AssignedTemplateTags is POST /templates/tags' answer (201).
type AssignedTemplateTags struct {
	BuildID string   `json:"buildID"`
	Tags    []string `json:"tags"`
}

// DeleteTemplateTagsRequest is the body of DELETE /templates/tags.
type DeleteTemplateTagsRequest struct {
	Name string   `json:"name"`
	Tags []string `json:"tags"`
}

// TemplateTag is one item of GET /templates/{id}/tags.
type TemplateTag struct {
	Tag       string    `json:"tag"`
	BuildID   string    `json:"buildID"`
	CreatedAt time.Time `json:"createdAt"`
}

// Template is one item of GET /templates.
type Template struct {
	TemplateID    string     `json:"templateID"`
	BuildID       string     `json:"buildID"`
	CPUCount      int32      `json:"cpuCount"`
	MemoryMB      int32      `json:"memoryMB"`
	DiskSizeMB    int32      `json:"diskSizeMB"`
	Public        bool       `json:"public"`
	Aliases       []string   `json:"aliases"`
	Names         []string   `json:"names"`
	CreatedAt     time.Time  `json:"createdAt"`
	UpdatedAt     time.Time  `json:"updatedAt"`
	CreatedBy     *struct{}  `json:"createdBy"`
	LastSpawnedAt *time.Time `json:"lastSpawnedAt"`
	SpawnCount    int64      `json:"spawnCount"`
	BuildCount    int32      `json:"buildCount"`
	EnvdVersion   string     `json:"envdVersion"`
	BuildStatus   string     `json:"buildStatus"`
}

// TemplateBuild is one build in TemplateWithBuilds.
type TemplateBuild struct {
	BuildID     string     `json:"buildID"`
	Status      string     `json:"status"`
	CreatedAt   time.Time  `json:"createdAt"`
	UpdatedAt   time.Time  `json:"updatedAt"`
	FinishedAt  *time.Time `json:"finishedAt,omitempty"`
	CPUCount    int32      `json:"cpuCount"`
	MemoryMB    int32      `json:"memoryMB"`
	DiskSizeMB  int32      `json:"diskSizeMB,omitempty"`
	EnvdVersion string     `json:"envdVersion,omitempty"`
	// Layers is Hutch's own: the build's layers, bottom first (the
	// console shows them; E2B's SDKs ignore it).
	Layers []TemplateLayer `json:"layers,omitempty"`
}

// TemplateLayer is one layer of a build (Hutch's own).
type TemplateLayer struct {
	ID        string    `json:"id"`
	SizeBytes int64     `json:"sizeBytes"`
	Source    string    `json:"source,omitempty"`
	CreatedAt time.Time `json:"createdAt"`
}

// TemplateWithBuilds is GET /templates/{id}'s answer.
type TemplateWithBuilds struct {
	TemplateID    string          `json:"templateID"`
	Public        bool            `json:"public"`
	Aliases       []string        `json:"aliases"`
	Names         []string        `json:"names"`
	CreatedAt     time.Time       `json:"createdAt"`
	UpdatedAt     time.Time       `json:"updatedAt"`
	LastSpawnedAt *time.Time      `json:"lastSpawnedAt"`
	SpawnCount    int64           `json:"spawnCount"`
	Builds        []TemplateBuild `json:"builds"`
}
