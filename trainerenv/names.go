package trainerenv

// The variables' names, each its name in Go's case. Where they come from is
// in the package's documentation.

// Generic, this project's own.
const (
	ElasticJobID        = "ELASTIC_JOB_ID"
	ElasticGeneration   = "ELASTIC_GENERATION"
	ElasticRestartCount = "ELASTIC_RESTART_COUNT"
	ElasticNodeRank     = "ELASTIC_NODE_RANK"
	// ElasticRank, ElasticLocalRank and ElasticWorldSize are the process's
	// rank in its role, on its node, and the role's processes: what
	// torchrun calls RANK, LOCAL_RANK and WORLD_SIZE, under every
	// framework.
	ElasticRank      = "ELASTIC_RANK"
	ElasticLocalRank = "ELASTIC_LOCAL_RANK"
	ElasticWorldSize = "ELASTIC_WORLD_SIZE"
	ElasticNNodes    = "ELASTIC_NNODES"
	ElasticRole      = "ELASTIC_ROLE"
	// ElasticFramework is the framework whose contract the process got:
	// auto, pytorch, paddle or mindspore.
	ElasticFramework = "ELASTIC_FRAMEWORK"
	// ElasticCheckpointSocket names the sidecar's checkpoint store
	// (package memckpt), an abstract unix socket written with a leading '@'.
	ElasticCheckpointSocket = "ELASTIC_CHECKPOINT_SOCKET"
	// ElasticCheckpointIncarnation names the life of the job the process
	// saves in (memckpt.Incarnation), which the files it writes carry.
	ElasticCheckpointIncarnation = "ELASTIC_CHECKPOINT_INCARNATION"
)

// Python's own: the module search path, with the directory of the sidecar's
// package elastic first and the user's path after it.
const PythonPath = "PYTHONPATH"

// PyTorch: torchrun's.
const (
	Rank                     = "RANK"
	LocalRank                = "LOCAL_RANK"
	WorldSize                = "WORLD_SIZE"
	LocalWorldSize           = "LOCAL_WORLD_SIZE"
	GroupRank                = "GROUP_RANK"
	GroupWorldSize           = "GROUP_WORLD_SIZE"
	RoleName                 = "ROLE_NAME"
	RoleRank                 = "ROLE_RANK"
	RoleWorldSize            = "ROLE_WORLD_SIZE"
	MasterAddr               = "MASTER_ADDR"
	MasterPort               = "MASTER_PORT"
	TorchelasticRunID        = "TORCHELASTIC_RUN_ID"
	TorchelasticRestartCount = "TORCHELASTIC_RESTART_COUNT"
	TorchelasticMaxRestarts  = "TORCHELASTIC_MAX_RESTARTS"
	// TorchelasticUseAgentStore says whether rank 0 connects to a store
	// its agent hosts (torch/distributed/rendezvous.py): here it hosts it.
	TorchelasticUseAgentStore   = "TORCHELASTIC_USE_AGENT_STORE"
	NCCLAsyncErrorHandling      = "NCCL_ASYNC_ERROR_HANDLING"
	TorchNCCLAsyncErrorHandling = "TORCH_NCCL_ASYNC_ERROR_HANDLING"
	OMPNumThreads               = "OMP_NUM_THREADS"
)

// PaddlePaddle: paddle.distributed.launch's, fleetrun's and
// paddle-operator's.
const (
	PaddleTrainersNum               = "PADDLE_TRAINERS_NUM"
	PaddleTrainerEndpoints          = "PADDLE_TRAINER_ENDPOINTS"
	PaddleCurrentEndpoint           = "PADDLE_CURRENT_ENDPOINT"
	PaddleTrainers                  = "PADDLE_TRAINERS"
	PaddlePServersIPPortList        = "PADDLE_PSERVERS_IP_PORT_LIST"
	PaddlePServerNum                = "PADDLE_PSERVER_NUM"
	PaddleHeterEndpoints            = "PADDLE_HETER_ENDPOINTS"
	PaddleAllHeterTrainerIPPortList = "PADDLE_ALL_HETER_TRAINER_IP_PORT_LIST"
	PaddlePort                      = "PADDLE_PORT"
	PodIP                           = "POD_IP"
	PaddleRankInNode                = "PADDLE_RANK_IN_NODE"
	PaddleLocalRank                 = "PADDLE_LOCAL_RANK"
	PaddleLocalSize                 = "PADDLE_LOCAL_SIZE"
	PaddleGlobalRank                = "PADDLE_GLOBAL_RANK"
	PaddleGlobalSize                = "PADDLE_GLOBAL_SIZE"
	PaddleNNodes                    = "PADDLE_NNODES"
	PaddleMaster                    = "PADDLE_MASTER"
	TrainingRole                    = "TRAINING_ROLE"
	PaddleTrainerID                 = "PADDLE_TRAINER_ID"
	PaddlePServerID                 = "PADDLE_PSERVER_ID"
	PaddleWithGloo                  = "PADDLE_WITH_GLOO"
	PaddleGlooRendezvous            = "PADDLE_GLOO_RENDEZVOUS"
	PaddleGlooHTTPEndpoint          = "PADDLE_GLOO_HTTP_ENDPOINT"
	PaddleRole                      = "PADDLE_ROLE"
	PaddleDistriBackend             = "PADDLE_DISTRI_BACKEND"
	FlagsSelectedGPUs               = "FLAGS_selected_gpus"
)

// PaddlePaddle's launcher's own inputs, for paddle.distributed.launch run
// per node, and the variables taken from it.
const (
	PaddleRank                       = "PADDLE_RANK"
	PaddleNProcPerNode               = "PADDLE_NPROC_PER_NODE"
	PaddleJobID                      = "PADDLE_JOB_ID"
	FlagsFixedPort                   = "FLAGS_FIXED_PORT"
	PaddleElasticServer              = "PADDLE_ELASTIC_SERVER"
	PaddleElasticJobID               = "PADDLE_ELASTIC_JOB_ID"
	PaddleElasticNP                  = "PADDLE_ELASTIC_NP"
	PaddleElasticTimeout             = "PADDLE_ELASTIC_TIMEOUT"
	PaddleElasticFaultToleranceLevel = "PADDLE_ELASTIC_FAULT_TOLERANC_LEVEL"
	PaddleElasticLevel               = "PADDLE_ELASTIC_LEVEL"
	PaddleIPs                        = "PADDLE_IPS"
	DistributedTrainerEndpoints      = "DISTRIBUTED_TRAINER_ENDPOINTS"
	PaddleRunMode                    = "PADDLE_RUN_MODE"
	PaddleServersEndpoints           = "PADDLE_SERVERS_ENDPOINTS"
	PaddleTrainersEndpoints          = "PADDLE_TRAINERS_ENDPOINTS"
	PaddleServerNum                  = "PADDLE_SERVER_NUM"
	PaddleTrainerNum                 = "PADDLE_TRAINER_NUM"
)

// MindSpore: msrun's, and parameter-server mode's MS_SERVER_NUM.
const (
	RankID        = "RANK_ID"
	RankSize      = "RANK_SIZE"
	DeviceID      = "DEVICE_ID"
	MSTopoTimeout = "MS_TOPO_TIMEOUT"

	MSSchedHost = "MS_SCHED_HOST"
	MSSchedPort = "MS_SCHED_PORT"
	MSWorkerNum = "MS_WORKER_NUM"
	MSServerNum = "MS_SERVER_NUM"
	MSNodeID    = "MS_NODE_ID"
	MSRole      = "MS_ROLE"
)
