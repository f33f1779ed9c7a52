// nansense: a debugger for LibTorch training loops. Include this one header.
#pragma once

#include "nansense/architecture.h"
#include "nansense/batch_traits.h"
#include "nansense/debug.h"
#include "nansense/errors.h"
#include "nansense/item_tensors.h"
#include "nansense/moment.h"
#include "nansense/options.h"
#include "nansense/position.h"
#include "nansense/schedule.h"
#include "nansense/session.h"
#include "nansense/snapshot.h"
#include "nansense/stats.h"
#include "nansense/time_travel.h"
