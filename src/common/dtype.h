// How every reply, message and error spells a dtype: numpy's names
// ("float32", "bfloat16", "int64"), as people who train models read them,
// never c10's ("Float", "Long"); and a shape: "[64, 16, 28, 28]".
#pragma once

#include <c10/core/ScalarType.h>
#include <c10/util/ArrayRef.h>

#include <optional>
#include <string>

namespace nansense::common {

std::string dtype_name(c10::ScalarType dtype);
// The inverse for the floating-point, integer and bool dtypes dtype_name
// spells ("float32" -> Float); nullopt for any other name.
std::optional<c10::ScalarType> dtype_of_name(const std::string& name);
std::string shape_text(c10::IntArrayRef shape);

}  // namespace nansense::common
