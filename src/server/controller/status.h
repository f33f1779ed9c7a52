// The run's status (replies_status.h's Status, typed: its JSON is
// to_json(status)) and what fills it beside the controller's areas.
#pragma once

#include <string>

#include "nansense/position.h"
#include "nansense/schedule.h"
#include "nansense/session.h"
#include "server/controller/json_views.h"
#include "server/controller/replies_status.h"

namespace nansense::server {

// What to do next in `state`, for people and agents.
const char* hint(RunState state);
// The status's hint: hint(state), or what a locked session offers while paused.
std::string status_hint(RunState state, bool locked);

// The schedule as the status shows it.
ScheduleSummary schedule_summary(const Schedule& schedule);

}  // namespace nansense::server
