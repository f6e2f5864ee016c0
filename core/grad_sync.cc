#include "core/grad_sync.h"
