#include "ddp_runtime/snapshots/pickle_reader.hpp"

#include <ATen/core/Dict.h>
#include <ATen/core/List.h>
#include <ATen/ops/empty.h>
#include <caffe2/serialize/inline_container.h>
#include <caffe2/serialize/read_adapter_interface.h>

#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <string_view>
#include <unordered_map>

#include "ddp_runtime/common/error_message.hpp"

namespace ddp::runtime {
namespace {

[[noreturn]] void fail(const std::string& why) { throw UnreadableArchive(why); }

class ViewAdapter : public caffe2::serialize::ReadAdapterInterface {
 public:
  explicit ViewAdapter(ByteView bytes) : bytes_(std::move(bytes)) {}
  size_t size() const override { return bytes_.size; }
  size_t read(uint64_t pos, void* buf, size_t n, const char* /*what*/) const override {
    if (pos >= bytes_.size) return 0;
    n = std::min<size_t>(n, bytes_.size - pos);
    std::memcpy(buf, bytes_.data + pos, n);
    return n;
  }

 private:
  ByteView bytes_;
};

// What a GLOBAL names, when it is something the pickle calls rather than a value.
enum class Callable { None, OrderedDict, RebuildTensor, RebuildParameter, FirstArgument };

struct Item {
  c10::IValue value;
  Callable callable = Callable::None;
  std::string name;  // of the global, for messages
};

// Python's storage classes name the element type of a tensor's storage.
const std::map<std::string, at::ScalarType>& storage_types() {
  static const std::map<std::string, at::ScalarType> types = {{"FloatStorage", at::kFloat},
                                                              {"DoubleStorage", at::kDouble},
                                                              {"HalfStorage", at::kHalf},
                                                              {"BFloat16Storage", at::kBFloat16},
                                                              {"LongStorage", at::kLong},
                                                              {"IntStorage", at::kInt},
                                                              {"ShortStorage", at::kShort},
                                                              {"CharStorage", at::kChar},
                                                              {"ByteStorage", at::kByte},
                                                              {"BoolStorage", at::kBool},
                                                              {"ComplexFloatStorage", at::kComplexFloat},
                                                              {"ComplexDoubleStorage", at::kComplexDouble},
                                                              {"UntypedStorage", at::kByte}};
  return types;
}

bool is_storage_type(at::ScalarType type) {
  for (const auto& entry : storage_types()) {
    if (entry.second == type) return true;
  }
  return false;
}

using StorageLoader = std::function<at::Tensor(const std::string& key, at::ScalarType type, int64_t numel)>;

// Python's pickle machine for the opcodes of protocols 2 to 4 that torch.save's data.pkl can hold.
class Unpickler {
 public:
  Unpickler(std::string_view pickle, StorageLoader load_storage)
      : in_(pickle), load_storage_(std::move(load_storage)) {}

  c10::IValue run() {
    while (true) {
      if (step()) break;
    }
    if (stack_.size() != 1 || !marks_.empty())
      fail("its pickle ends with " + std::to_string(stack_.size()) + " values");
    return value(stack_.back());
  }

 private:
  uint8_t byte() {
    if (pos_ >= in_.size()) fail("its pickle is truncated");
    return static_cast<uint8_t>(in_[pos_++]);
  }
  uint64_t little(int bytes) {
    uint64_t result = 0;
    for (int i = 0; i < bytes; ++i) result |= uint64_t{byte()} << (8 * i);
    return result;
  }
  std::string take(uint64_t size) {
    if (size > in_.size() - pos_) fail("its pickle is truncated");
    std::string text(in_.substr(pos_, size));
    pos_ += size;
    return text;
  }
  std::string line() {
    const std::size_t end = in_.find('\n', pos_);
    if (end == std::string_view::npos) fail("its pickle is truncated");
    std::string text(in_.substr(pos_, end - pos_));
    pos_ = end + 1;
    return text;
  }

  void push(c10::IValue value) {
    Item item;
    item.value = std::move(value);
    stack_.push_back(std::move(item));
  }
  Item& top() {
    if (stack_.size() <= (marks_.empty() ? 0 : marks_.back())) fail("its pickle is malformed (empty stack)");
    return stack_.back();
  }
  Item pop() {
    Item item = std::move(top());
    stack_.pop_back();
    return item;
  }
  c10::IValue pop_value() { return value(pop()); }
  std::vector<c10::IValue> pop_to_mark() {
    if (marks_.empty()) fail("its pickle is malformed (no mark)");
    const std::size_t start = marks_.back();
    marks_.pop_back();
    std::vector<c10::IValue> values;
    for (std::size_t i = start; i < stack_.size(); ++i) values.push_back(value(stack_[i]));
    stack_.resize(start);
    return values;
  }
  static c10::IValue value(const Item& item) {
    if (item.callable != Callable::None) fail("it uses the Python global " + item.name + " as a value");
    return item.value;
  }
  // Pickle fills a list or dict before it puts it inside another value, except for a value that contains itself:
  // that one is added to after it was put inside (or into itself). Such values are refused: their reference
  // counts never reach zero (memory lost on every read), and whatever walks them never ends.
  void contain(const c10::IValue& value) {
    if (value.isList() || value.isGenericDict()) contained_.emplace(value.internalToPointer(), value);
  }
  void contain(const std::vector<c10::IValue>& values) {
    for (const c10::IValue& value : values) contain(value);
  }
  const c10::IValue& target_on_top() {
    const c10::IValue& target = top().value;
    if ((target.isList() || target.isGenericDict()) && contained_.count(target.internalToPointer()) > 0)
      fail("its pickle adds to a list or dict after putting it inside a value (a value that contains itself)");
    return target;
  }
  c10::impl::GenericList list_on_top() {
    const c10::IValue& target = target_on_top();
    if (!target.isList()) fail("its pickle appends to something that is not a list");
    return target.toList();
  }
  c10::impl::GenericDict dict_on_top() {
    const c10::IValue& target = target_on_top();
    if (!target.isGenericDict()) fail("its pickle sets an item of something that is not a dict");
    return target.toGenericDict();
  }
  static void set_item(c10::impl::GenericDict& dict, const c10::IValue& key, const c10::IValue& value) {
    if (!key.isString() && !key.isInt())
      fail("it has a dict key of type " + key.tagKind() + "; keys must be str or int");
    dict.insert_or_assign(key, value);
  }
  c10::IValue tuple(std::vector<c10::IValue> values) {
    contain(values);
    return c10::ivalue::Tuple::create(std::move(values));
  }
  std::vector<c10::IValue> pop_n(std::size_t n) {
    std::vector<c10::IValue> values(n);
    for (std::size_t i = n; i-- > 0;) values[i] = pop_value();
    return values;
  }
  void memo_put(uint64_t id) { memo_[id] = top(); }
  void memo_get(uint64_t id) {
    const auto found = memo_.find(id);
    if (found == memo_.end()) fail("its pickle refers to memo entry " + std::to_string(id) + ", which it never stored");
    stack_.push_back(found->second);
  }

  // Returns true at STOP.
  bool step() {
    const uint8_t op = byte();
    switch (op) {
      case 0x80: byte(); break;                          // PROTO
      case 0x95: little(8); break;                       // FRAME
      case '.': return true;                             // STOP
      case '(': marks_.push_back(stack_.size()); break;  // MARK
      case '0': pop(); break;                            // POP
      case '1': pop_to_mark(); break;                    // POP_MARK
      case '2': stack_.push_back(top()); break;          // DUP
      case 'N': push(c10::IValue()); break;
      case 0x88: push(true); break;
      case 0x89: push(false); break;
      case 'J': push(int64_t{static_cast<int32_t>(little(4))}); break;  // BININT
      case 'K': push(int64_t(little(1))); break;                        // BININT1
      case 'M': push(int64_t(little(2))); break;                        // BININT2
      case 0x8a: push(long1()); break;
      case 'G': push(binfloat()); break;
      case 'X': push(take(little(4))); break;   // BINUNICODE
      case 0x8c: push(take(little(1))); break;  // SHORT_BINUNICODE
      case 0x8d: push(take(little(8))); break;  // BINUNICODE8
      case ')': push(tuple({})); break;
      case 't': push(tuple(pop_to_mark())); break;
      case 0x85: push(tuple(pop_n(1))); break;
      case 0x86: push(tuple(pop_n(2))); break;
      case 0x87: push(tuple(pop_n(3))); break;
      case ']': push(c10::impl::GenericList(c10::AnyType::get())); break;
      case 'l': {  // LIST
        c10::impl::GenericList list(c10::AnyType::get());
        std::vector<c10::IValue> values = pop_to_mark();
        contain(values);
        for (c10::IValue& v : values) list.push_back(std::move(v));
        push(list);
      } break;
      case 'a': {  // APPEND
        c10::IValue v = pop_value();
        contain(v);
        list_on_top().push_back(std::move(v));
      } break;
      case 'e': {  // APPENDS
        std::vector<c10::IValue> values = pop_to_mark();
        contain(values);
        c10::impl::GenericList list = list_on_top();
        for (c10::IValue& v : values) list.push_back(std::move(v));
      } break;
      case '}': push(c10::impl::GenericDict(c10::AnyType::get(), c10::AnyType::get())); break;
      case 'd': {  // DICT
        const std::vector<c10::IValue> values = pop_to_mark();
        contain(values);
        c10::impl::GenericDict dict(c10::AnyType::get(), c10::AnyType::get());
        set_items(dict, values);
        push(dict);
      } break;
      case 's': {  // SETITEM
        const c10::IValue v = pop_value();
        const c10::IValue k = pop_value();
        contain(v);
        c10::impl::GenericDict dict = dict_on_top();
        set_item(dict, k, v);
      } break;
      case 'u': {  // SETITEMS
        const std::vector<c10::IValue> values = pop_to_mark();
        contain(values);
        c10::impl::GenericDict dict = dict_on_top();
        set_items(dict, values);
      } break;
      case 'q': memo_put(little(1)); break;      // BINPUT
      case 'r': memo_put(little(4)); break;      // LONG_BINPUT
      case 0x94: memo_put(memo_.size()); break;  // MEMOIZE
      case 'h': memo_get(little(1)); break;      // BINGET
      case 'j': memo_get(little(4)); break;      // LONG_BINGET
      case 'c': {                                // GLOBAL
        const std::string module = line();
        stack_.push_back(global(module, line()));
      } break;
      case 0x93: {  // STACK_GLOBAL
        const c10::IValue name = pop_value();
        const c10::IValue module = pop_value();
        if (!name.isString() || !module.isString()) fail("its pickle names a global by something other than strings");
        stack_.push_back(global(module.toStringRef(), name.toStringRef()));
      } break;
      case 'R': {  // REDUCE
        const c10::IValue args = pop_value();
        const Item function = pop();
        push(call(function, args));
      } break;
      case 'b': {  // BUILD: an OrderedDict's attributes (state_dict()._metadata) are not needed
        pop();
        if (!top().value.isGenericDict()) fail("it sets the attributes of a Python object");
      } break;
      case 'Q': push(persistent(pop_value())); break;  // BINPERSID
      default: {
        char hex[8];
        std::snprintf(hex, sizeof hex, "0x%02x", op);
        fail(std::string("its pickle has opcode ") + hex + ", which torch.save does not write");
      }
    }
    return false;
  }

  void set_items(c10::impl::GenericDict& dict, const std::vector<c10::IValue>& values) {
    if (values.size() % 2 != 0) fail("its pickle has a dict with a key but no value");
    for (std::size_t i = 0; i < values.size(); i += 2) set_item(dict, values[i], values[i + 1]);
  }

  c10::IValue long1() {
    const uint8_t size = byte();
    if (size > 8) fail("it holds an integer wider than 64 bits");
    uint64_t bits = little(size);
    if (size > 0 && size < 8 && (bits >> (8 * size - 1)) != 0) bits |= ~uint64_t{0} << (8 * size);  // sign
    return static_cast<int64_t>(bits);
  }

  c10::IValue binfloat() {
    uint64_t bits = 0;
    for (int i = 0; i < 8; ++i) bits = (bits << 8) | byte();  // big-endian
    double value;
    std::memcpy(&value, &bits, sizeof value);
    return value;
  }

  Item global(const std::string& module, const std::string& name) {
    Item item;
    item.name = module + "." + name;
    if (module == "collections" && name == "OrderedDict") {
      item.callable = Callable::OrderedDict;
    } else if (module == "torch._utils" && name == "_rebuild_tensor_v2") {
      item.callable = Callable::RebuildTensor;
    } else if (module == "torch._utils" && (name == "_rebuild_parameter" || name == "_rebuild_parameter_with_state")) {
      item.callable = Callable::RebuildParameter;
    } else if (module == "torch.jit._pickle" && (name == "restore_type_tag" || name.rfind("build_", 0) == 0)) {
      item.callable = Callable::FirstArgument;  // what LibTorch's pickler wraps typed dicts and lists in
    } else if (module == "torch" && storage_types().count(name) > 0) {
      item.value = static_cast<int64_t>(storage_types().at(name));
    } else if (module.rfind("__torch__", 0) == 0) {
      fail("it holds a TorchScript object (" + item.name + "), not tensors saved by torch.save");
    } else {
      fail("it holds the Python global " + item.name +
           "; only tensors, dicts, lists, tuples, numbers and strings are read (what torch.load(weights_only=True) "
           "reads)");
    }
    return item;
  }

  c10::IValue call(const Item& function, const c10::IValue& args) {
    if (function.callable == Callable::None) fail("its pickle calls a value");
    if (!args.isTuple()) fail("its pickle calls " + function.name + " without an argument tuple");
    const auto& a = args.toTupleRef().elements();
    switch (function.callable) {
      case Callable::OrderedDict:
        if (a.size() != 0) fail("it builds an OrderedDict from arguments");
        return c10::impl::GenericDict(c10::AnyType::get(), c10::AnyType::get());
      case Callable::RebuildTensor:
        if (a.size() < 4) fail("it calls " + function.name + " with " + std::to_string(a.size()) + " arguments");
        return rebuild_tensor(a[0], a[1], a[2], a[3]);
      case Callable::RebuildParameter:
      case Callable::FirstArgument:
        if (a.size() < 1) fail("it calls " + function.name + " without arguments");
        if (function.callable == Callable::RebuildParameter && !a[0].isTensor())
          fail("it builds a parameter from a non-tensor");
        return a[0];
      case Callable::None: break;
    }
    fail("its pickle calls a value");
  }

  static std::vector<int64_t> int_tuple(const c10::IValue& value, const char* what) {
    if (!value.isTuple()) fail(std::string("a tensor's ") + what + " is not a tuple");
    std::vector<int64_t> result;
    for (const c10::IValue& v : value.toTupleRef().elements()) {
      if (!v.isInt() || v.toInt() < 0) fail(std::string("a tensor's ") + what + " holds something other than a count");
      result.push_back(v.toInt());
    }
    return result;
  }

  // The tensor must lie inside its storage: a damaged file may claim otherwise.
  static c10::IValue rebuild_tensor(const c10::IValue& storage, const c10::IValue& offset_value,
                                    const c10::IValue& size_value, const c10::IValue& stride_value) {
    if (!storage.isTensor() || !offset_value.isInt()) fail("it rebuilds a tensor from something other than a storage");
    const at::Tensor& base = storage.toTensor();
    const std::vector<int64_t> sizes = int_tuple(size_value, "size");
    const std::vector<int64_t> strides = int_tuple(stride_value, "stride");
    const int64_t offset = offset_value.toInt();
    if (sizes.size() != strides.size() || offset < 0) fail("a tensor's size, stride and offset do not agree");
    __int128 last = offset;
    bool empty = false;
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      empty = empty || sizes[i] == 0;
      if (sizes[i] > 0) last += static_cast<__int128>(sizes[i] - 1) * strides[i];
    }
    if (!empty && last >= base.numel()) {
      fail("a tensor reaches past the end of its storage (" + std::to_string(base.numel()) + " elements)");
    }
    return at::empty({0}, base.options()).set_(base.storage(), offset, sizes, strides);
  }

  c10::IValue persistent(const c10::IValue& id) {
    if (!id.isTuple()) fail("it has a persistent id that is not a tuple");
    const std::vector<c10::IValue> a = id.toTupleRef().elements().vec();
    if (a.size() != 5 || !a[0].isString() || a[0].toStringRef() != "storage" || !a[1].isInt() || !a[2].isString() ||
        !a[4].isInt() || a[4].toInt() < 0) {
      fail("it has a persistent id other than torch.save's ('storage', type, key, location, size)");
    }
    const auto type = static_cast<at::ScalarType>(a[1].toInt());
    if (!is_storage_type(type)) fail("it has a storage of an unknown element type");
    return load_storage_(a[2].toStringRef(), type, a[4].toInt());
  }

  std::string_view in_;
  std::size_t pos_ = 0;
  StorageLoader load_storage_;
  std::vector<Item> stack_;
  std::vector<std::size_t> marks_;
  std::unordered_map<uint64_t, Item> memo_;
  // Lists and dicts put inside another value, by address; held, so that no new one takes a freed one's address.
  std::unordered_map<const void*, c10::IValue> contained_;
};

// A record's bytes can be used in place when the zip stores them uncompressed. The local header that precedes
// them says so; PyTorchStreamReader gives only where the data starts, so the header is found from there.
bool stored_uncompressed(const ByteView& bytes, std::size_t data_offset) {
  constexpr std::size_t kHeader = 30;
  const auto u16 = [&](std::size_t at) {
    return static_cast<std::size_t>(static_cast<uint8_t>(bytes.data[at])) |
           static_cast<std::size_t>(static_cast<uint8_t>(bytes.data[at + 1])) << 8;
  };
  if (data_offset > bytes.size || data_offset < kHeader) return false;
  const std::size_t lowest = data_offset >= kHeader + 2 * 0xffff ? data_offset - kHeader - 2 * 0xffff : 0;
  for (std::size_t h = data_offset - kHeader + 1; h-- > lowest;) {
    if (std::memcmp(bytes.data + h, "PK\x03\x04", 4) == 0 && h + kHeader + u16(h + 26) + u16(h + 28) == data_offset) {
      return u16(h + 8) == 0;
    }
  }
  return false;
}

at::DataPtr alias(const ByteView& bytes, std::size_t offset) {
  auto* owner = new std::shared_ptr<const void>(bytes.owner);
  return at::DataPtr(
      const_cast<char*>(bytes.data + offset), owner,
      [](void* context) { delete static_cast<std::shared_ptr<const void>*>(context); }, at::kCPU);
}

at::Tensor load_storage(caffe2::serialize::PyTorchStreamReader& reader, const ByteView& bytes, const std::string& key,
                        at::ScalarType type, int64_t numel) {
  const std::string record = "data/" + key;
  if (!reader.hasRecord(record)) fail("it has no record " + record + " for a tensor's data");
  const auto item_size = static_cast<int64_t>(c10::elementSize(type));
  if (numel > std::numeric_limits<int64_t>::max() / item_size) fail("a tensor's storage is too large");
  const auto size = static_cast<std::size_t>(numel * item_size);
  at::DataPtr data;
  const std::size_t offset = numel == 0 ? 0 : reader.getRecordOffset(record);
  const bool aligned = reinterpret_cast<std::uintptr_t>(bytes.data + offset) % static_cast<std::size_t>(item_size) == 0;
  if (numel == 0) {
    data = at::DataPtr(nullptr, at::kCPU);
  } else if (offset <= bytes.size && size <= bytes.size - offset && aligned && stored_uncompressed(bytes, offset)) {
    data = alias(bytes, offset);
  } else {
    auto [copy, copy_size] = reader.getRecord(record);
    if (copy_size < size) {
      fail("its record " + record + " holds " + std::to_string(copy_size) + " bytes but the tensor needs " +
           std::to_string(size));
    }
    data = std::move(copy);
  }
  at::Storage storage(at::Storage::use_byte_size_t(), size, std::move(data), nullptr, false);
  return at::empty({0}, at::TensorOptions(type)).set_(storage, 0, {numel}, {1});
}

}  // namespace

c10::IValue read_torch_save(const ByteView& bytes) {
  if (bytes.size >= 2 && static_cast<uint8_t>(bytes.data[0]) == 0x80 && bytes.data[1] == 2) {
    fail(
        "it is in torch.save's legacy format (_use_new_zipfile_serialization=False); save it again with torch.save's "
        "default");
  }
  try {
    caffe2::serialize::PyTorchStreamReader reader(std::make_shared<ViewAdapter>(bytes));
    if (reader.hasRecord("byteorder")) {
      const auto [order, size] = reader.getRecord("byteorder");
      if (std::string(static_cast<const char*>(order.get()), size) != "little")
        fail("it was saved on a big-endian machine");
    }
    if (!reader.hasRecord("data.pkl")) fail("it has no data.pkl, so torch.save did not write it");
    const auto [pickle, size] = reader.getRecord("data.pkl");
    std::map<std::string, at::Tensor> storages;
    Unpickler unpickler(std::string_view(static_cast<const char*>(pickle.get()), size),
                        [&](const std::string& key, at::ScalarType type, int64_t numel) {
                          auto found = storages.find(key);
                          if (found == storages.end()) {
                            found = storages.emplace(key, load_storage(reader, bytes, key, type, numel)).first;
                          }
                          if (found->second.scalar_type() != type || found->second.numel() != numel) {
                            fail("two tensors describe storage " + key + " differently");
                          }
                          return found->second;
                        });
    return unpickler.run();
  } catch (const c10::Error& e) {
    throw UnreadableArchive("it is not a torch.save file in zip format (" + error_summary(e) + ")");
  }
}

}  // namespace ddp::runtime
